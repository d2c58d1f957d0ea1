// test-runner: about 75 s (scripts/test.ts starts the longest first)
/**
 * Wake on a matching line, against a real opencode serve and the scripted agent:
 * (1) a dev server's readiness line wakes the session once while it keeps running; after the
 *     agent stops it nothing more comes; a run that exits by itself after the line wakes once more
 *     with the exit status;
 * (2) a watcher printing FAIL 50 times in 20 s with wake_limit 3: at most three match wakes, spaced
 *     by wake_min_interval_ms, every line delivered or counted in dropped:;
 * (3) a match while the agent is inside a long bash call: no wake during the turn, one after it.
 * About 25–45 s per test on an idle 2-core machine; each test is a project of one shared server.
 */
import { expect, test } from "bun:test"
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
  const exit = await waitForEnvelope(
    live,
    sessionID,
    (e) => e.status === "exited (code=0)",
    "the exit wake of run 2",
    45_000,
  )
  const exitAnswer = await waitForReply(
    live,
    sessionID,
    exit.message.info.id,
    (t) => t.includes("exit code 0"),
    "the exit report",
  )
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
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
    // Spaced by the interval: decided at least intervalMs apart (the server stamps each message a few ms after).
    const created = wakes.map((e) => e.message.info.time.created)
    for (let i = 1; i < created.length; i++)
      expect((created[i] as number) - (created[i - 1] as number)).toBeGreaterThanOrEqual(intervalMs - 100)
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
