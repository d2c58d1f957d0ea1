// test-runner: about 165 s (scripts/test.ts starts the longest first)
/**
 * Wake on a matching line, against a real opencode serve and the scripted agent:
 * (1) a dev server's readiness line wakes the session once while it keeps running; after the
 *     agent stops it nothing more comes; a run that exits by itself after the line wakes once more
 *     with the exit status;
 * (2) a watcher printing FAIL 50 times in 20 s with wake_limit 3: at most three match wakes, spaced
 *     by wake_min_interval_ms, every line delivered or counted in dropped:;
 * (3) a match while the agent is inside a long bash call: no wake during the turn, one after it;
 * (4) a real streaming runtime, `python3 -m http.server`: its readiness line wakes the session while
 *     it serves, though Python block-buffers a pipe;
 * (5) a real `vitest --watch`: the one wake of a failing rerun carries the test's name,
 *     Expected/Received and file:line.
 * About 25–45 s per test on an idle 2-core machine; each test is a project of one shared server
 * (a project costs the server about a third of a server of its own).
 */
import { expect, test } from "bun:test"
import { mkdirSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { connect } from "node:net"
import { dirname, join } from "node:path"
import { freePort } from "../src/free-port.ts"
import { exitReport, matchReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import type { Envelope, LiveProject } from "../src/monitor-qa.ts"
import {
  after,
  explained,
  isAssistant,
  liveProcesses,
  planPrompt,
  stepWithTool,
  waitForEnvelope,
  waitForProcess,
  waitForReply,
  waitForWake,
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { type SessionMessage, sleep, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

// One server; each test is a project of it with its own plugin options.
const shared = serverPerFile()

const isMatchWake = (e: Envelope) => e.status === "running" && /\nwake: line/.test(e.text)
const matchWakeHeader = (e: Envelope) => e.text.match(/\n(wake: .*)\n/)?.[1]
const answered = (messages: SessionMessage[], e: Envelope) =>
  messages.filter((m) => isAssistant(m) && m.info.parentID === e.message.info.id)

function expectNoObservationAnswered(live: LiveProject, messages: SessionMessage[]) {
  expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
  expect(live.model.scripted().some((r) => r.reply && "text" in r.reply && r.reply.text === OBSERVATION_ANSWERED)).toBe(
    false,
  )
}

test("readiness: one REPORT turn while the dev server runs; after monitor_stop no further wake; a run that exits after the line wakes once more with its exit status", async () => {
  const live = await shared.project()
  const marker = `wake-dev-${process.pid}-${Date.now()}`
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Start the dev server and tell me when it is ready.",
      [
        [
          "monitor_start",
          {
            command: `echo starting ${marker}; sleep 2; echo 'ready on :4321'; sleep 120; true`,
            label: "dev",
            wake_pattern: "ready on",
          },
        ],
      ],
      "Dev server starting; I will report when it is ready.",
    ),
  )
  // `; true` keeps the shell, whose command line holds the marker, from exec'ing `sleep 120`.
  const groups = await waitForProcess(marker, "the dev server")
  const { envelope: wake, reply: report } = await waitForWake(
    live,
    sessionID,
    isMatchWake,
    (t) => t.startsWith("REPORT:"),
    "the readiness wake",
    45_000,
  )

  await explained(live, { dev: sessionID }, async () => {
    // Woken while the server still runs, with the line and why.
    expect(liveProcesses(marker, groups).length).toBeGreaterThan(0)
    expect(matchWakeHeader(wake)).toBe("wake: line matched wake_pattern (1 of 1) at seq=2")
    expect(wake.text).toContain("[stdout seq=2] ready on :4321")
    expect(textOf(report)).toBe(
      matchReport({ monitorId: wake.monitorId, label: "dev", wake: matchWakeHeader(wake), wakeLine: "ready on :4321" }),
    )
    expect(report.info.parentID).toBe(wake.message.info.id)
    // Exactly one turn after the plan's own answer: the REPORT. The `starting` line was an observation.
    const messages = await live.messages(sessionID)
    const said = messages.find((m) => isAssistant(m) && textOf(m).startsWith("Dev server starting"))
    expect(
      after(messages, said?.info.id ?? "")
        .filter(isAssistant)
        .map((m) => m.info.id),
    ).toEqual([report.info.id])
    // `starting` came as an observation of its own, or inside the wake when it was still waiting
    // (the person's message holds output back for user_message_window_ms); either way once.
    const envelopes = await live.envelopes(sessionID)
    expect(envelopes.at(-1)?.message.info.id).toBe(wake.message.info.id)
    expect(envelopes.filter(isMatchWake)).toHaveLength(1)
    for (const e of envelopes.slice(0, -1)) expect([e.status, answered(messages, e)]).toEqual(["running", []])
    const delivered = envelopes.flatMap((e) => [...e.text.matchAll(/\[stdout seq=(\d+)\]/g)].map((m) => Number(m[1])))
    expect(delivered).toEqual([1, 2])
    expect(wake.message.info.agent).toBe("build")
    const log = live.pluginLog().join("\n")
    expect(log).toMatch(
      new RegExp(
        `"sent monitor output".*batchSeq=${wake.batch} .*shouldReply=true forceActiveDispatch=false matchWake=1/1`,
      ),
    )
  })

  // The agent stops it: no further wake, the process group is gone.
  const stop = await live.prompt(
    sessionID,
    planPrompt("Stop it now.", [["monitor_stop", { monitor_id: wake.monitorId }]], "Stopped the dev server."),
  )
  const stopped = await waitForReply(live, sessionID, "", (t) => t === "Stopped the dev server.", "the stop answer")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  await waitFor(() => liveProcesses(marker, groups).length === 0, 15_000, 100, "the dev server gone")
  await sleep(3_000)
  await explained(live, { dev: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    expect(after(messages, stopped.info.id)).toEqual([])
    expect((await live.envelopes(sessionID)).filter((e) => e.message.info.time.created >= stop)).toEqual([])
  })

  // Second run: the server prints the line, then exits by itself: the match wake, then the exit
  // wake (on a machine so slow that the match wake still waits when the exit comes, the exit wake
  // carries the line: one wake instead of two, the line still delivered once).
  await live.prompt(
    sessionID,
    planPrompt(
      "Run it once more.",
      [
        [
          "monitor_start",
          { command: "sleep 1; echo 'ready on :4322'; sleep 6; exit 0", label: "dev2", wake_pattern: "ready on" },
        ],
      ],
      "Second run started.",
    ),
  )
  const { envelope: exit, reply: exitAnswer } = await waitForWake(
    live,
    sessionID,
    (e) => e.status === "exited (code=0)",
    (t) => t.includes("exit code 0"),
    "the exit wake of run 2",
    45_000,
  )
  await explained(live, { dev: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    const run2 = (await live.envelopes(sessionID)).filter((e) => e.monitorId === exit.monitorId)
    expect(run2.at(-1)?.message.info.id).toBe(exit.message.info.id)
    expect(run2.slice(0, -1).map((e) => [e.status, isMatchWake(e)])).toEqual(
      run2.length === 2 ? [["running", true]] : [],
    )
    for (const match2 of run2.slice(0, -1)) {
      expect(answered(messages, match2).map((m) => textOf(m))).toEqual([
        matchReport({
          monitorId: match2.monitorId,
          label: "dev2",
          wake: matchWakeHeader(match2),
          wakeLine: "ready on :4322",
        }),
      ])
    }
    expect(run2.flatMap((e) => [...e.text.matchAll(/\[stdout seq=\d+\] ready on :4322/g)])).toHaveLength(1)
    expect(textOf(exitAnswer)).toBe(exitReport({ monitorId: exit.monitorId, label: "dev2", status: "exited (code=0)" }))
    expectNoObservationAnswered(live, messages)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 180_000)

test("FAIL 50 times in 20 s with wake_limit 3: at most three match wakes, spaced by wake_min_interval_ms, all 50 lines accounted for", async () => {
  const intervalMs = 3_000
  const live = await shared.project({ pluginOptions: { wake_min_interval_ms: intervalMs } })
  const sessionID = await live.newSession()
  const command = 'for i in $(seq 1 50); do echo "FAIL test $i"; sleep 0.4; done; exit 1'
  await live.prompt(
    sessionID,
    planPrompt(
      "Run the watcher; wake me on failures.",
      [["monitor_start", { command, label: "watch", wake_pattern: "FAIL", wake_limit: 3 }]],
      "Watching.",
    ),
  )
  const exit = await waitForEnvelope(live, sessionID, (e) => e.status === "exited (code=1)", "the exit wake", 90_000)
  await waitForReply(live, sessionID, exit.message.info.id, (t) => t.includes("exit code 1"), "the exit report")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

  await explained(live, { watch: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    const envelopes = (await live.envelopes(sessionID)).filter((e) => e.monitorId === exit.monitorId)
    const wakes = envelopes.filter(isMatchWake)
    expect(wakes.length).toBeGreaterThanOrEqual(1)
    expect(wakes.length).toBeLessThanOrEqual(3)
    expect(wakes.map((e) => matchWakeHeader(e)?.match(/\((\d+) of 3\)/)?.[1])).toEqual(
      wakes.map((_, i) => String(i + 1)),
    )
    // Spaced by the interval: decided at least intervalMs apart. The server stamps each message when it
    // creates it, a moment after the send, and on a loaded machine that moment varies by up to a few
    // hundred ms (2 880 ms between two wakes decided 3 000 ms apart, in CI). Lines came every 400 ms,
    // so wakes without the interval would be far closer.
    const created = wakes.map((e) => e.message.info.time.created)
    for (let i = 1; i < created.length; i++)
      expect((created[i] as number) - (created[i - 1] as number)).toBeGreaterThanOrEqual(intervalMs - 300)
    // Every match wake got its REPORT turn; the observations in between got none.
    for (const e of wakes) expect(answered(messages, e).map((m) => textOf(m).startsWith("REPORT:"))).toEqual([true])
    for (const e of envelopes.filter((x) => x.status === "running" && !isMatchWake(x)))
      expect(answered(messages, e)).toEqual([])
    // All 50 lines accounted for: each delivered once, or counted in a dropped: line.
    const seqs = envelopes.flatMap((e) =>
      [...e.text.matchAll(/\[stdout seq=(\d+)\] FAIL test \d+/g)].map((m) => Number(m[1])),
    )
    expect(new Set(seqs).size).toBe(seqs.length)
    const dropped = envelopes.reduce((sum, e) => sum + Number(e.text.match(/\ndropped: (\d+) matched/)?.[1] ?? 0), 0)
    expect(seqs.length + dropped).toBe(50)
    expectNoObservationAnswered(live, messages)
    console.log(
      `FAIL x50: ${wakes.length} match wakes, gaps ${created
        .slice(1)
        .map((t, i) => t - (created[i] as number))
        .join(", ")} ms; ` + `${envelopes.length} envelopes, ${seqs.length} lines delivered + ${dropped} dropped`,
    )
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 180_000)

test("a match while the agent is busy in a long bash call: no wake during the turn, one right after it", async () => {
  const live = await shared.project()
  const marker = `wake-busy-${process.pid}-${Date.now()}`
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Start the server, then do the slow work.",
      [
        [
          "monitor_start",
          {
            command: `sleep 1; echo 'ready on :4323 ${marker}'; sleep 120; true`,
            label: "srv",
            wake_pattern: "ready on",
          },
        ],
        ["bash", { command: "sleep 8", description: "slow work" }],
      ],
      "Slow work done.",
    ),
  )
  // `; true` keeps the shell, whose command line holds the marker, from exec'ing `sleep 120`.
  const groups = await waitForProcess(marker, "the server process")
  const { envelope: wake, reply: report } = await waitForWake(
    live,
    sessionID,
    isMatchWake,
    (t) => t.startsWith("REPORT:"),
    "the match wake",
    60_000,
  )

  await explained(live, { srv: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    // The line came while bash ran; the wake waited for the whole turn (the slow step and the
    // plan's final answer, never replaced by a REPORT), then one turn answered it.
    const slow = stepWithTool(messages, "bash")
    expect(slow?.parts.find((p) => p.type === "tool" && p.tool === "bash")?.state?.status).toBe("completed")
    expect(wake.message.info.time.created).toBeGreaterThan(slow?.info.time.completed ?? Number.POSITIVE_INFINITY)
    expect(
      after(messages, slow?.info.id ?? "")
        .filter(isAssistant)
        .map((m) => textOf(m)),
    ).toEqual(["Slow work done.", textOf(report)])
    const said = messages.find((m) => isAssistant(m) && textOf(m) === "Slow work done.")
    const turnEnd = said?.info.time.completed ?? Number.NaN
    expect(wake.message.info.time.created).toBeGreaterThanOrEqual(turnEnd)
    expect(after(messages, said?.info.id ?? "").map((m) => m.info.id)).toEqual([wake.message.info.id, report.info.id])
    expect(report.info.parentID).toBe(wake.message.info.id)
    expect((await live.envelopes(sessionID)).map((e) => [e.status, isMatchWake(e)])).toEqual([["running", true]])
    expect(live.pluginLog().join("\n")).toMatch(
      /"monitor output deferred".*batchSeq=1 .*shouldReply=true .*reason="session busy"/,
    )
    expect(liveProcesses(marker, groups).length).toBeGreaterThan(0)
    expectNoObservationAnswered(live, messages)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 180_000)

// (4) Streaming runtimes stream: `python3 -m http.server` prints `Serving HTTP on …` once it listens,
// and a readiness `wake_pattern` on that line must wake the session while the server runs. Python
// block-buffers stdout when it is a pipe, so without a per-line switch in the command's
// environment the line would stay in Python's buffer for as long as the server runs and the
// wake would never come. The server is stopped by the agent afterwards and must be gone.
// The opencode server's environment (live-qa's isolated one) has no PYTHONUNBUFFERED of its own.

/** True when something accepts a TCP connection on 127.0.0.1:port (nothing is sent: no request log line). */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" })
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })
}

test("python3 -m http.server: the readiness line wakes the session while the server runs", async () => {
  const live = await shared.project()
  const port = await freePort()
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Serve the folder and tell me when it is up.",
      [
        [
          "monitor_start",
          {
            command: `python3 -m http.server ${port} --bind 127.0.0.1`,
            label: "web",
            wake_pattern: "Serving HTTP",
          },
        ],
      ],
      "Starting the server; I will report when it is up.",
    ),
  )
  // The server listens (Python prints the line right after it binds) ...
  await waitFor(async () => ((await listening(port)) ? true : undefined), 30_000, 100, "the server listening")
  const listenedAt = Date.now()
  // ... and the line that says so wakes the session, within seconds, while it still runs.
  const { envelope: wake, reply } = await explained(live, { web: sessionID }, () =>
    waitForWake(
      live,
      sessionID,
      isMatchWake,
      (t) => t.startsWith("REPORT:"),
      "the readiness wake while the server listens",
      15_000,
    ),
  )

  console.log(
    `the readiness wake was created ${wake.message.info.time.created - listenedAt} ms after the test saw the port listening (polled every 100 ms)`,
  )

  await explained(live, { web: sessionID }, async () => {
    expect(wake.text).toMatch(
      new RegExp(
        `\\n\\[stdout seq=\\d+\\] Serving HTTP on 127\\.0\\.0\\.1 port ${port} \\(http://127\\.0\\.0\\.1:${port}/\\)`,
      ),
    )
    expect(reply.info.parentID).toBe(wake.message.info.id)
    expect(await listening(port)).toBe(true)
  })

  // The agent stops it: the port is free again and nothing is left behind.
  await live.prompt(
    sessionID,
    planPrompt("Stop the server.", [["monitor_stop", { monitor_id: wake.monitorId }]], "Stopped the server."),
  )
  await waitForReply(live, sessionID, reply.info.id, (t) => t === "Stopped the server.", "the stop answer")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  await explained(live, { web: sessionID }, async () => {
    expect(await listening(port)).toBe(false)
    expect((await live.envelopes(sessionID)).filter(isMatchWake).map((e) => e.batch)).toEqual([wake.batch])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 150_000)

// (5) A wake says what broke: a real `vitest --watch` (pinned in this package's devDependencies) runs
// under a monitor that wakes on vitest's failure marks, and the one wake a failure brings must
// carry what the agent needs to act on it: the failing test's name, the assertion's
// Expected/Received lines and its file:line.
//
// Why the scenario is shaped this way (vitest 3.2.7 through a pipe, measured):
// - vitest prints the details of a failure (the diff, ` ❯ sum.test.js:5:21`, the code frame) only
//   in its end-of-run summary, after every test of the run has finished. The verbose reporter
//   marks a failing test the moment it fails (` × sum.test.js > adds 1 + 2` and its one-line
//   message), so a wake on the first failure mark comes before the details. The file's other
//   tests each wait on a 100 ms timer (as tests of I/O do), so the details follow the mark by
//   ~350 ms, one line every ~100 ms, then the summary in one burst, then vitest waits quietly.
//   (With the default reporter and `\bFAIL\b|Tests failed`, the first FAIL line opens the
//   summary and its details follow it by 4-10 ms: whether they land in the wake is a race with
//   the plugin's own checks before a send, lost in 1 run of 6 here.)
// - The failure comes from a watch-mode rerun after a file edit, as a person works with a
//   watcher, not from vitest's first run: a first run fails within the person's
//   user_message_window_ms, where a wake waits anyway and takes the later lines with it.
//   The edit comes once the session is idle and quiet.

const VITEST = join(dirname(createRequire(import.meta.url).resolve("vitest/package.json")), "vitest.mjs")
const WAKE_PATTERN = "×|\\bFAIL\\b"

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
  const live = await shared.project()
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
