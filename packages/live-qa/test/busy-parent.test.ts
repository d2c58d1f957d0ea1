// test-runner: about 54 s (scripts/test.ts starts the longest first)
/**
 * Scenario 2: the monitor exits while the agent is inside a long tool call (bash `sleep 8`).
 * Nothing reaches the busy session while that turn runs, except the terminal notice once
 * max_active_defer_ms is over; with no ceiling the wake waits for the turn to end.
 */
import { expect, test } from "bun:test"
import { exitReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import type { LiveProject } from "../src/monitor-qa.ts"
import {
  after,
  explained,
  isAssistant,
  planPrompt,
  stepWithTool,
  waitForEnvelope,
  waitForReply,
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { textOf, waitForIdle } from "../src/timeline.ts"

// One server; each test is a project of it with its own plugin options.
const shared = serverPerFile()

const PROMPT = planPrompt(
  "Start the short job, then do the slow work.",
  [
    ["monitor_start", { command: "echo early-line; sleep 1; exit 3", label: "short" }],
    ["bash", { command: "sleep 8", description: "slow work" }],
  ],
  "Slow work done.",
)
// A short flush interval puts early-line in a streaming batch of its own, well before the exit.
const FLUSH = { flush_interval_ms: 250 }

async function runBusyParent(live: LiveProject) {
  const sessionID = await live.newSession()
  await live.prompt(sessionID, PROMPT)
  const wake = await waitForEnvelope(live, sessionID, (e) => e.status !== "running", "the terminal envelope", 45_000)
  const reply = await waitForReply(
    live,
    sessionID,
    wake.message.info.id,
    (t) => t.includes("exit code 3"),
    "the report of exit code 3",
  )
  const observation = await waitForEnvelope(
    live,
    sessionID,
    (e) => e.text.includes("early-line"),
    "the early-line observation",
  )
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  const messages = await live.messages(sessionID)
  const slow = stepWithTool(messages, "bash")
  const envelopes = await live.envelopes(sessionID)
  const report = exitReport({ monitorId: wake.monitorId, label: "short", status: "exited (code=3)" })
  return { sessionID, wake, reply, observation, messages, slow, envelopes, report }
}

/** What holds with or without a ceiling: each batch once, the observation after the turn, never answered. */
function expectCommon(live: LiveProject, run: Awaited<ReturnType<typeof runBusyParent>>) {
  const { messages, slow, observation, wake, envelopes } = run
  expect(envelopes.map((e) => [e.batch, e.status]).sort()).toEqual([
    [1, "running"],
    [2, "exited (code=3)"],
  ])
  expect(observation.batch).toBe(1)
  expect(observation.text).toContain("[stdout seq=1] early-line")
  expect(wake.monitorId).toBe(observation.monitorId)

  // The slow step ran the whole sleep; it is the turn's long tool call.
  const bash = slow?.parts.find((p) => p.type === "tool" && p.tool === "bash")
  expect(bash?.state?.status).toBe("completed")
  const slowEnd = slow?.info.time.completed ?? Number.NaN
  // The observation is created only once every assistant message before it has completed.
  const created = observation.message.info.time.created
  expect(created).toBeGreaterThan(slowEnd)
  const before = messages.slice(
    0,
    messages.findIndex((m) => m.info.id === observation.message.info.id),
  )
  for (const m of before.filter(isAssistant))
    expect(m.info.time.completed ?? Number.POSITIVE_INFINITY).toBeLessThanOrEqual(created)
  // Nothing ever answered the observation.
  expect(messages.some((m) => isAssistant(m) && m.info.parentID === observation.message.info.id)).toBe(false)
  expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
  expect(live.model.scripted().some((r) => r.reply && "text" in r.reply && r.reply.text === OBSERVATION_ANSWERED)).toBe(
    false,
  )
  // While the slow step ran, batch 1 was held back because the session was busy.
  expect(live.pluginLog().join("\n")).toMatch(/"monitor output deferred".*batchSeq=1 .*reason="session busy"/)
}

test("busy parent, ceiling 1000 ms: the exit notice is forced into the running turn, which answers it", async () => {
  const live = await shared.project({ pluginOptions: { ...FLUSH, max_active_defer_ms: 1000 } })
  const run = await runBusyParent(live)
  await explained(live, { parent: run.sessionID }, async () => {
    expectCommon(live, run)
    const { messages, slow, wake, reply, observation } = run
    const log = live.pluginLog().join("\n")
    expect(log).toMatch(
      /"forced monitor output into a busy session".*batchSeq=2 .*shouldReply=true forceActiveDispatch=true reason="max_active_defer_ms reached"/,
    )
    expect(log).not.toMatch(/"forced monitor output into a busy session".*batchSeq=1 /)

    // The wake landed while the slow tool was still running...
    const slowStep = slow?.info.time ?? { created: Number.NaN }
    expect(wake.message.info.time.created).toBeGreaterThan(slowStep.created)
    expect(wake.message.info.time.created).toBeLessThan(slowStep.completed ?? Number.NaN)
    // ...and the same loop answered it at its next step, right after the slow step: the model was
    // not called in between, the reply answers the wake (parentID) and reports code 3.
    const assistants = messages.filter(isAssistant)
    expect(assistants.map((m) => m.info.finish)).toEqual(["tool-calls", "tool-calls", "stop"])
    expect(assistants[1]?.info.id).toBe(slow?.info.id ?? "")
    expect(assistants[2]?.info.id).toBe(reply.info.id)
    expect(reply.info.parentID).toBe(wake.message.info.id)
    expect(reply.info.time.created).toBeGreaterThanOrEqual(slowStep.completed ?? Number.NaN)
    expect(textOf(reply)).toBe(run.report)
    // The forced terminal batch went ahead of the waiting observation, which lands after the turn.
    expect(observation.message.info.time.created).toBeGreaterThanOrEqual(reply.info.time.completed ?? Number.NaN)
    // The whole session: the prompt, both steps, the wake inside the slow step, its report, then the observation.
    expect(messages.map((m) => m.info.id)).toEqual([
      messages[0]?.info.id ?? "-",
      assistants[0]?.info.id ?? "-",
      slow?.info.id ?? "-",
      wake.message.info.id,
      reply.info.id,
      observation.message.info.id,
    ])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 120_000)

test("busy parent, no ceiling: the exit notice waits for the turn to end, then wakes the session", async () => {
  const live = await shared.project({ pluginOptions: { ...FLUSH, max_active_defer_ms: 0 } })
  const run = await runBusyParent(live)
  await explained(live, { parent: run.sessionID }, async () => {
    expectCommon(live, run)
    const { messages, wake, reply, observation } = run
    const log = live.pluginLog().join("\n")
    expect(log).not.toContain("forced monitor output into a busy session")
    expect(log).toMatch(
      /"sent monitor output".*batchSeq=2 .*shouldReply=true forceActiveDispatch=false reason="session idle"/,
    )

    // The turn ran to its own end: the plan's final answer completed before anything was injected.
    const assistants = messages.filter(isAssistant)
    const said = assistants.find((m) => textOf(m) === "Slow work done.")
    const turnEnd = said?.info.time.completed ?? Number.NaN
    expect(assistants.map((m) => m.info.finish)).toEqual(["tool-calls", "tool-calls", "stop", "stop"])
    expect(assistants[2]?.info.id).toBe(said?.info.id ?? "")
    expect(observation.message.info.time.created).toBeGreaterThanOrEqual(turnEnd)
    expect(wake.message.info.time.created).toBeGreaterThanOrEqual(turnEnd)
    // In order: observation, wake, then one new turn that reports code 3 and ends the session.
    expect(after(messages, said?.info.id ?? "").map((m) => m.info.id)).toEqual([
      observation.message.info.id,
      wake.message.info.id,
      reply.info.id,
    ])
    expect(reply.info.parentID).toBe(wake.message.info.id)
    expect(textOf(reply)).toBe(run.report)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 120_000)
