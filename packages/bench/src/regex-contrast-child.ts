/**
 * Runs JS's built-in (backtracking) RegExp in a separate process, because a catastrophic
 * backtrack cannot be interrupted in-process: the parent kills this process at its time cap.
 * Usage: bun regex-contrast-child.ts <kind> <n>. Prints `CONTRAST_RESULT {json}`.
 */
import { contrastCase } from "./regex-cases.ts"

const [kind, size] = process.argv.slice(2)
const n = Number(size)
if (!Number.isInteger(n) || n < 1 || n > 64) throw new Error("usage: regex-contrast-child.ts <kind> <n 1..64>")
const { pattern, input } = contrastCase(kind ?? "", n)
const regexp = new RegExp(pattern)
const started = performance.now()
const matched = regexp.test(input)
const ms = performance.now() - started
process.stdout.write(`CONTRAST_RESULT ${JSON.stringify({ kind, n, matched, ms })}\n`)
