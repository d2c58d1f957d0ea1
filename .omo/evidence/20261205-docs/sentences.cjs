// Average words per sentence of a markdown file's prose: code blocks, tables, headings and HTML
// comments left out; an inline code span counts as one word; a paragraph or list item ends a sentence.
const fs = require("fs")
for (const file of process.argv.slice(2)) {
  let text = fs.readFileSync(file, "utf8")
  text = text.replace(/<!--[\s\S]*?-->/g, " ")
  text = text.replace(/```[\s\S]*?```/g, "\n\n")
  const blocks = []
  let cur = []
  let inList = false
  for (const line of text.split("\n")) {
    const t = line.trim()
    if (t === "" || t.startsWith("|") || t.startsWith("#")) { if (cur.length) blocks.push(cur.join(" ")); cur = []; inList = false; continue }
    if (/^([-*]|\d+\.)\s/.test(t)) { if (cur.length && !inList) blocks.push(cur.join(" ")); cur = []; inList = process.env.PROSE_ONLY === "1"; if (!inList) cur = [t.replace(/^([-*]|\d+\.)\s+/, "")]; continue }
    if (inList && /^\s/.test(line)) continue
    inList = false
    cur.push(t)
  }
  if (cur.length) blocks.push(cur.join(" "))
  const sentences = []
  for (let b of blocks) {
    b = b.replace(/`[^`]*`/g, "CODE").replace(/\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/\*\*/g, "")
    for (const s of b.split(/(?<=[.!?])\s+(?=[A-Z"(`*]|CODE)/)) {
      const words = s.split(/\s+/).filter((w) => /[A-Za-z0-9]/.test(w))
      if (words.length) sentences.push(words.length)
    }
  }
  const total = sentences.reduce((a, b) => a + b, 0)
  const sorted = [...sentences].sort((a, b) => a - b)
  const over = sentences.filter((n) => n > 30).length
  console.log(`${file}: ${sentences.length} sentences, ${total} words, mean ${(total / sentences.length).toFixed(1)} words, median ${sorted[Math.floor(sorted.length / 2)]}, longest ${sorted.at(-1)}, over 30 words: ${over}`)
}
