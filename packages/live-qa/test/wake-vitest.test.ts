/**
 * A wake says what broke: a real `vitest --watch` (pinned in this package's devDependencies) runs
 * under a monitor that wakes on vitest's failure marks, and the one wake a failure brings must
 * carry what the agent needs to act on it: the failing test's name, the assertion's
 * Expected/Received lines and its file:line.
 *
 * Why the scenario is shaped this way (vitest 3.2.7 through a pipe, measured):
 * - vitest prints the details of a failure (the diff, ` ❯ sum.test.js:5:21`, the code frame) only
 *   in its end-of-run summary, after every test of the run has finished. The verbose reporter
 *   marks a failing test the moment it fails (` × sum.test.js > adds 1 + 2` and its one-line
 *   message), so a wake on the first failure mark comes before the details. The file's other
 *   tests each wait on a 100 ms timer (as tests of I/O do), so the details follow the mark by
 *   ~350 ms, one line every ~100 ms, then the summary in one burst, then vitest waits quietly.
 *   (With the default reporter and `\bFAIL\b|Tests failed`, the first FAIL line opens the
 *   summary and its details follow it by 4-10 ms: whether they land in the wake is a race with
 *   the plugin's own checks before a send, lost in 1 run of 6 here.)
 * - The failure comes from a watch-mode rerun after a file edit, as a person works with a
 *   watcher, not from vitest's first run: a first run fails within the person's
 *   user_message_window_ms, where a wake waits anyway and takes the later lines with it.
 *   The edit comes once the session is idle and quiet.
 * About 25-40 s on an idle 2-core machine.
 */
import { afterEach, expect, test } from "bun:test"
import { mkdirSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import type { Envelope, MonitorQA } from "../src/monitor-qa.ts"
import { startMonitorQA } from "../src/monitor-qa.ts"
import { explained, planPrompt, waitForEnvelope, waitForWake } from "../src/scenario.ts"
import { sleep, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
}, 30_000)

const VITEST = join(dirname(createRequire(import.meta.url).resolve("vitest/package.json")), "vitest.mjs")
const WAKE_PATTERN = "×|\\bFAIL\\b"

const isMatchWake = (e: Envelope) => e.status === "running" && /\nwake: line/.test(e.text)
/** The output rows of an envelope, without their `[stdout seq=N] ` prefixes. */
const rowsOf = (e: Envelope) => [...e.text.matchAll(/^\[(?:stdout|stderr) seq=\d+\] ?(.*)$/gm)].map((m) => m[1] ?? "")

// The test that breaks comes first; the four after it take 100 ms each, so the run's summary
// (the failure's details) comes ~400 ms after the failure mark.
const SUM_TEST = `import { expect, test } from "vitest"
import { sum } from "./sum.js"

test("adds 1 + 2", () => {
  expect(sum(1, 2)).toBe(3)
})

const settled = (value) => new Promise((resolve) => setTimeout(() => resolve(value), 100))
for (const n of [1, 2, 3, 4]) {
  test(\`resolves value \${n}\`, async () => {
    expect(await settled(n)).toBe(n)
  })
}
`

/** What the agent needs to act on the failure, each as a row of vitest's output. */
const WHAT_BROKE: Record<string, RegExp> = {
  "the failing test's name": /(×|\bFAIL\b)\s+sum\.test\.js > adds 1 \+ 2/,
  "the - Expected line": /^- Expected\s*$/,
  "the + Received line": /^\+ Received\s*$/,
  "the expected value (- 3)": /^- 3\s*$/,
  "the received value (+ 2)": /^\+ 2\s*$/,
  "the assertion's file:line": /sum\.test\.js:5:\d+/,
}

/** The project as it starts: `sum` adds, and every test passes. */
function writeProject(root: string): void {
  mkdirSync(root, { recursive: true })
  writeFileSync(join(root, "package.json"), '{ "name": "calc", "type": "module" }\n')
  writeFileSync(join(root, "sum.js"), "export const sum = (a, b) => a + b\n")
  writeFileSync(join(root, "sum.test.js"), SUM_TEST)
}

test("vitest --watch: the one wake of a failing rerun holds the test's name, Expected/Received and file:line", async () => {
  const live = await startMonitorQA()
  qa = live
  const root = join(live.server.directory, "calc")
  writeProject(root)
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Run the tests in watch mode and tell me when something breaks.",
      [
        [
          "monitor_start",
          {
            command: `cd calc && node ${VITEST} --watch --reporter=verbose`,
            label: "tests",
            wake_pattern: WAKE_PATTERN,
          },
        ],
      ],
      "Watching the tests.",
    ),
  )
  // The first run passes: its lines come as observations. Then the session is idle and quiet
  // (past user_message_window_ms and the hold after the last send) before the file changes.
  await waitForEnvelope(live, sessionID, (e) => e.text.includes("Waiting for file changes"), "the first run", 60_000)
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  await sleep(2_500)
  writeFileSync(join(root, "sum.js"), "export const sum = (a, b) => a * b\n")

  const { envelope: wake } = await waitForWake(
    live,
    sessionID,
    isMatchWake,
    (t) => t.startsWith("REPORT:"),
    "the failure's wake",
    60_000,
  )
  // What came of that monitor after the wake: printed, so a failing run shows where the details went.
  await sleep(1_500)
  const envelopes = (await live.envelopes(sessionID)).filter((e) => e.monitorId === wake.monitorId)
  const later = envelopes.filter((e) => e.message.info.time.created > wake.message.info.time.created)
  console.log(
    [
      `the wake (batch ${wake.batch}) held ${rowsOf(wake).length} rows:`,
      ...rowsOf(wake).map((r) => `  | ${r}`),
      ...later.map(
        (e) => `then batch ${e.batch} (${isMatchWake(e) ? "wake" : "observation"}): ${rowsOf(e).length} rows`,
      ),
    ].join("\n"),
  )

  await explained(live, { tests: sessionID }, async () => {
    // The failing test's name, the assertion's two sides, and where it failed: in the wake itself.
    const rows = rowsOf(wake)
    const missing = Object.entries(WHAT_BROKE)
      .filter(([, row]) => !rows.some((r) => row.test(r)))
      .map(([what]) => what)
    expect(missing).toEqual([])
    // One wake for the failure (wake_limit 1): what followed it were observations.
    expect(envelopes.filter(isMatchWake).map((e) => e.batch)).toEqual([wake.batch])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 150_000)
