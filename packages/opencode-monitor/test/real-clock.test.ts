import { describe, expect, test } from "bun:test"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"

/**
 * Unit tests never sleep on the real clock: timing logic runs on the injected FakeScheduler, and a
 * real process is awaited by an event or by a condition polled with a generous deadline
 * (`waitFor`, `drive`). A fixed sleep is too short on a loaded machine and wasted on an idle one,
 * and a sleep followed by "nothing happened" proves nothing. This scan keeps new ones out; the
 * fixed waits left are listed with the reason they need real time. A test that truly needs real
 * time with a margin is a live test (packages/live-qa/test).
 */
const SLEEPS: [string, RegExp][] = [
  ["Bun.sleep", /\bBun\.sleep(?:Sync)?\(/g],
  ["a promise resolved by setTimeout", /\bsetTimeout\(\s*(?:r|res|resolve|\(\)\s*=>\s*(?:r|res|resolve)\(\))\s*[,)]/g],
  ["node:timers/promises", /["']node:timers\/promises["']/g],
  ["the real scheduler", /\brealScheduler\b/g],
]

/** Files allowed their fixed real-clock waits, exactly this many, and why. */
const ALLOWED: Record<string, { count: number; why: string }> = {
  "support/processes.ts": { count: 1, why: "waitFor: the poll behind every real-process wait, with its deadline" },
  "support/drive.ts": { count: 1, why: "drive: lets real processes run between steps of the fake clock" },
  "support/retention-child.ts": {
    count: 1,
    why: "a memory measurement in its own process: the allocator returns freed pages over time before the sample",
  },
  "process.test.ts": {
    count: 6,
    why:
      "the descendant tracker ticks every 200 ms on the real clock (src/process/tracker.ts) and nothing tells " +
      "when it has seen a child; remove these once it can be awaited. One more: a bystander must still run " +
      "past the real watchdog script's grace and KILL round (a process outside the plugin's clock)",
  },
}

const TEST_DIR = import.meta.dir
const SELF = relative(TEST_DIR, import.meta.path)

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return /\.tsx?$/.test(entry) ? [path] : []
  })
}

/** Each real-clock wait in `text` outside comments, as `line: what`. */
function sleepsIn(text: string): string[] {
  const found: string[] = []
  text.split("\n").forEach((line, i) => {
    if (/^\s*(\/\/|\*|\/\*)/.test(line)) return
    for (const [what, pattern] of SLEEPS) {
      for (const _ of line.matchAll(pattern)) found.push(`${i + 1}: ${what}`)
    }
  })
  return found
}

describe("no unit test sleeps on the real clock", () => {
  const files = sourceFiles(TEST_DIR)
    .map((path) => relative(TEST_DIR, path))
    .filter((file) => file !== SELF)
    .sort()

  test("the scan sees every kind of sleep it looks for", () => {
    const sample = [
      "await Bun.sleep(100)",
      "await new Promise((r) => setTimeout(r, 5))",
      "await new Promise((resolve) => setTimeout(() => resolve(), 5))",
      'import { setTimeout } from "node:timers/promises"',
      "scheduler: realScheduler,",
      "// await Bun.sleep(100) in a comment is no sleep",
      "const timer = setTimeout(() => child.kill(), 8_000)",
    ].join("\n")
    expect(sleepsIn(sample)).toEqual([
      "1: Bun.sleep",
      "2: a promise resolved by setTimeout",
      "3: a promise resolved by setTimeout",
      "4: node:timers/promises",
      "5: the real scheduler",
    ])
  })

  test("only the listed files wait on the real clock, each no more than listed", () => {
    const unexpected: string[] = []
    for (const file of files) {
      const sleeps = sleepsIn(readFileSync(join(TEST_DIR, file), "utf8"))
      const allowed = ALLOWED[file]?.count ?? 0
      if (sleeps.length !== allowed) {
        unexpected.push(`${file}: ${sleeps.length} real-clock waits, ${allowed} allowed (${sleeps.join("; ")})`)
      }
    }
    // More: use the FakeScheduler, or await the event (waitFor a condition for a real process).
    // Fewer: lower the count in ALLOWED, or remove the entry.
    expect(unexpected).toEqual([])
    expect(Object.keys(ALLOWED).filter((file) => !files.includes(file))).toEqual([])
  })
})
