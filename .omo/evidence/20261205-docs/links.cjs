// Checks every relative markdown link (file and #anchor) in the given files, GitHub-style anchors.
const fs = require("fs"), path = require("path")
const slug = (h) => h.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, "").replace(/ /g, "-")
const anchors = (file) => {
  const text = fs.readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "")
  return new Set([...text.matchAll(/^#{1,6} (.*)$/gm)].map((m) => slug(m[1].replace(/`/g, ""))))
}
let bad = 0, count = 0
for (const file of process.argv.slice(2)) {
  const text = fs.readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "")
  for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    const link = m[1]
    if (/^[a-z]+:/.test(link)) continue
    count++
    const [target, anchor] = link.split("#")
    const dest = target ? path.resolve(path.dirname(file), target) : file
    if (!fs.existsSync(dest)) { console.log(`${file}: missing file ${link}`); bad++; continue }
    if (anchor && !anchors(dest).has(anchor)) { console.log(`${file}: missing anchor ${link}`); bad++ }
  }
}
console.log(`${count} links checked, ${bad} broken`)
process.exit(bad ? 1 : 0)
