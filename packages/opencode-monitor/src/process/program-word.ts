// Words that run the rest of the command line as the program: `exec npm start` runs npm.
const PREFIXES = new Set(["command", "exec", "builtin", "nohup", "env", "time"])
// Options of those prefixes that take the next word as their value (`exec -a name cmd`).
const VALUE_OPTIONS: Record<string, Set<string>> = { exec: new Set(["-a"]), env: new Set(["-u", "-C", "-S"]) }
const ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*\+?=/

/**
 * The program of a simple command's words (quotes as written), past `NAME=value` and PREFIXES:
 * `KEY=secret exec npm start` runs `npm`; `command -v x` only looks x up, so runs `command`.
 */
export function programWord(words: readonly string[]): string | undefined {
  let index = 0
  while (index < words.length && ASSIGNMENT.test(words[index] ?? "")) index++
  while (index < words.length) {
    const word = unquote(words[index] ?? "")
    if (!PREFIXES.has(word) || index === words.length - 1) return word
    let next = index + 1
    while (next < words.length) {
      const option = unquote(words[next] ?? "")
      if (word === "command" && /^-[a-zA-Z]*[vV]/.test(option)) return word
      if (word === "env" && ASSIGNMENT.test(option)) next++
      else if (option.startsWith("-") && option !== "-") next += VALUE_OPTIONS[word]?.has(option) ? 2 : 1
      else break
    }
    if (next >= words.length) return word
    index = next
  }
  return undefined
}

/** The last path segment of the program word, the default label of a monitor ("command" without one). */
export function programName(words: readonly string[]): string {
  const program = programWord(words) ?? ""
  return program.slice(program.lastIndexOf("/") + 1) || "command"
}

/** A word without one layer of matching quotes around it. */
export function unquote(word: string): string {
  const first = word[0]
  if (word.length >= 2 && (first === '"' || first === "'") && word.endsWith(first)) return word.slice(1, -1)
  return word
}
