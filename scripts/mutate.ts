/**
 * The mutation check (`npm run mutate`): applies each curated single-point mutation of the core to
 * its source file, runs the tests that should notice, restores the file, and prints a table.
 * Every mutation must be killed (at least one test fails); a survivor is a missing test. A mutation
 * whose text is no longer in its file is reported as stale: update the list with the code.
 *
 *   npm run mutate                 all mutations
 *   npm run mutate -- gates ring   only those whose id contains one of the words
 */
import { readFileSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { MUTATIONS, type Mutation } from "./mutations"

const ROOT = resolve(import.meta.dir, "..")
const PLUGIN = join(ROOT, "packages/opencode-monitor")
const BUN = process.execPath

type Outcome = { mutation: Mutation; verdict: "killed" | "SURVIVED" | "STALE"; failed: number; seconds: number }

const originals = new Map<string, string>()
function restoreAll(): void {
  for (const [file, text] of originals) writeFileSync(file, text)
  originals.clear()
}
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    restoreAll()
    process.exit(130)
  })
}

function apply(mutation: Mutation): string | undefined {
  const file = join(PLUGIN, mutation.file)
  const text = readFileSync(file, "utf8")
  const at = text.indexOf(mutation.find)
  if (at === -1 || text.indexOf(mutation.find, at + 1) !== -1) return undefined
  originals.set(file, text)
  writeFileSync(file, text.slice(0, at) + mutation.replace + text.slice(at + mutation.find.length))
  return file
}

function runTests(tests: readonly string[]): { failed: number; ok: boolean } {
  const result = Bun.spawnSync({
    cmd: [BUN, "test", "--timeout", "60000", ...tests.map((t) => join(PLUGIN, "test", t))],
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, FORCE_COLOR: "0" },
  })
  const output = result.stdout.toString() + result.stderr.toString()
  const failed = Number(output.match(/^\s*(\d+) fail$/m)?.[1] ?? (result.exitCode === 0 ? 0 : 1))
  return { failed, ok: result.exitCode === 0 }
}

function main(): number {
  const filters = process.argv.slice(2)
  const selected = MUTATIONS.filter((m) => filters.length === 0 || filters.some((f) => m.id.includes(f)))
  const outcomes: Outcome[] = []
  const started = Date.now()
  for (const mutation of selected) {
    const t0 = Date.now()
    const file = apply(mutation)
    if (!file) {
      outcomes.push({ mutation, verdict: "STALE", failed: 0, seconds: 0 })
      console.log(`STALE     ${mutation.id}: its text is not in ${mutation.file} exactly once`)
      continue
    }
    let result: { failed: number; ok: boolean }
    try {
      result = runTests(mutation.tests)
    } finally {
      restoreAll()
    }
    const verdict = result.ok ? "SURVIVED" : "killed"
    const seconds = (Date.now() - t0) / 1000
    outcomes.push({ mutation, verdict, failed: result.failed, seconds })
    console.log(`${verdict.padEnd(9)} ${mutation.id} (${result.failed} failed, ${seconds.toFixed(1)} s)`)
  }
  console.log("\n| # | mutation | file | tests failed | verdict |\n|---|---|---|---|---|")
  outcomes.forEach((o, i) => {
    console.log(`| ${i + 1} | ${o.mutation.id}: ${o.mutation.what} | ${o.mutation.file} | ${o.failed} | ${o.verdict} |`)
  })
  const killed = outcomes.filter((o) => o.verdict === "killed").length
  const total = ((Date.now() - started) / 1000).toFixed(0)
  console.log(`\n${killed} of ${outcomes.length} mutations killed in ${total} s`)
  return killed === outcomes.length ? 0 : 1
}

process.exitCode = main()
