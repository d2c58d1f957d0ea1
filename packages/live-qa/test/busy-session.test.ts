// test-runner: about 95 s (scripts/test.ts starts the longest first)
/**
 * The monitor exits while its session is busy:
 * Scenario 2: the agent is inside a long tool call (bash `sleep 8`). Nothing reaches the busy
 * session while that turn runs, except the terminal notice once max_active_defer_ms is over; with
 * no ceiling the wake waits for the turn to end.
 * Scenario 3: a person's message arrives just before the monitor exits, and the model is slow to
 * answer it. The person's turn runs first and completes; only then does the exit notice land and
 * wake the session. Exactly one terminal envelope: nothing doubled, nothing lost.
 * And a prompt of ours stored between a person's message being created and stored (its send was on
 * its way as they wrote) comes before their message: their turn answers them.
 * Each test is a project of one shared server, with its own opencode.json and scripted model.
 */
import { expect, test } from "bun:test"
import { join, resolve } from "node:path"
import { exitReport, monitorAgent, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import type { LiveProject } from "../src/monitor-qa.ts"
import {
  after,
  deliveriesLogged,
  explained,
  isAssistant,
  isRealUser,
  planPrompt,
  stepWithTool,
  waitForEnvelope,
  waitForExitNoticesDelivered,
  waitForReply,
  waitForWake,
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { sleep, textOf, waitForIdle } from "../src/timeline.ts"

// One server; each test is a project of it with its own plugin options.
const shared = serverPerFile()

const RACE_PLUGIN = resolve(import.meta.dir, "../src/person-race-plugin.ts")

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

const LATE_JOB = planPrompt(
  "Watch this job.",
  [["monitor_start", { command: "sleep 6; exit 5", label: "late" }]],
  "Watching it.",
)

test("user first: a person's turn that is running when the monitor exits completes before the wake", async () => {
  // Only the answer to the person is slow (3 s): their turn is still running when the monitor exits.
  const live = await shared.project({ script: monitorAgent({ userSaysDelayMs: 3000 }) })
  const sessionID = await live.newSession()
  await live.prompt(sessionID, LATE_JOB)
  const said = await waitForReply(live, sessionID, "", (t) => t === "Watching it.", "the agent to finish its turn")
  const startStep = stepWithTool(await live.messages(sessionID), "monitor_start")
  const startedAt = startStep?.parts.find((p) => p.tool === "monitor_start")?.state?.time?.end ?? Number.NaN

  // The person speaks about 5.8 s after the monitor started, just before its exit at 6 s (the first turn
  // has to end before that: on a loaded CI machine it once took more than 1.8 s).
  const wait = startedAt + 5800 - Date.now()
  expect(wait).toBeGreaterThan(0)
  await sleep(wait)
  const userSentAt = await live.prompt(sessionID, "USER_SAYS hello")
  const ended = await live.server.waitForLog(/"monitor ended".*status="exited \(code=5\)"/, 10_000)

  const { envelope: wake, reply } = await waitForWake(
    live,
    sessionID,
    (e) => e.status !== "running",
    (t) => t.includes("exit code 5"),
    "the terminal envelope",
  )
  // The exit notice logged as delivered: nothing of the monitor is left to send.
  await waitForExitNoticesDelivered(live, [wake.monitorId])

  await explained(live, { session: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    const person = messages.filter(isRealUser)
    expect(person.map((m) => textOf(m))).toEqual([LATE_JOB, "USER_SAYS hello"])
    const hello = person[1]
    const answer = messages.find((m) => isAssistant(m) && m.info.parentID === hello?.info.id)
    expect(textOf(answer)).toBe("Answering the user: hello")

    // The scenario really happened: the person spoke before the exit, and their turn was still
    // running when the monitor ended.
    expect(userSentAt).toBeLessThan(ended.at)
    expect(answer?.info.time.completed ?? Number.NaN).toBeGreaterThan(ended.at)

    // The person's turn ran first: its answer completed before the terminal envelope was created.
    expect(wake.message.info.time.created).toBeGreaterThanOrEqual(answer?.info.time.completed ?? Number.NaN)
    // Then the wake and its report, and nothing else.
    expect(after(messages, answer?.info.id ?? "").map((m) => m.info.id)).toEqual([wake.message.info.id, reply.info.id])
    expect(reply.info.parentID).toBe(wake.message.info.id)
    // The plugin sent every batch of the monitor once: a resend would be a second log line.
    for (const [key, sends] of deliveriesLogged(live)) expect([key, sends]).toEqual([key, 1])
    expect(textOf(reply)).toBe(exitReport({ monitorId: wake.monitorId, label: "late", status: "exited (code=5)" }))
    // The whole session: plan, two steps of the first turn, the person, their answer, wake, report.
    expect(messages.map((m) => m.info.id)).toEqual([
      person[0]?.info.id ?? "-",
      startStep?.info.id ?? "-",
      said.info.id,
      hello?.info.id ?? "-",
      answer?.info.id ?? "-",
      wake.message.info.id,
      reply.info.id,
    ])

    // Exactly one envelope (the command prints nothing): the terminal one, delivered once.
    const envelopes = await live.envelopes(sessionID)
    expect(envelopes.map((e) => [e.monitorId, e.batch, e.status])).toEqual([[wake.monitorId, 1, "exited (code=5)"]])
    const log = live.pluginLog().join("\n")
    expect(log.match(/"sent monitor output"/g)).toHaveLength(1)
    expect(log).toMatch(
      /"monitor output deferred".*batchSeq=1 .*reason="(session busy|assistant turn still running|user message within user_message_window_ms)"/,
    )
    expect(log).not.toContain("forced monitor output")
    expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 90_000)

const RACES = [
  { what: "an observation", ending: "sleep 120", report: undefined },
  { what: "an exit notice", ending: "exit 3", report: "exited (code=3)" },
] as const

test.each(RACES)(
  "user first: $what stored as a person writes comes before their message, and their turn answers them",
  async ({ ending, report }) => {
    // The plugin entry that has our prompt stored between the person's message being created and stored.
    const live = await shared.project({ script: monitorAgent(), pluginSpec: RACE_PLUGIN })
    const sessionID = await live.newSession()
    const go = join(live.server.directory, "go")
    const command = `while [ ! -e '${go}' ]; do sleep 0.05; done; echo first line; ${ending}`
    await live.prompt(
      sessionID,
      planPrompt("Watch this job.", [["monitor_start", { command, label: "chatty" }]], "Watching it."),
    )
    await waitForReply(live, sessionID, "", (t) => t === "Watching it.", "the agent to finish its turn")
    await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

    await live.prompt(sessionID, `USER_SAYS hello\nRACE ${go}`)
    await explained(live, { session: sessionID }, async () => {
      const answer = await waitForReply(live, sessionID, "", (t) => t === "Answering the user: hello", "the answer")
      await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
      const messages = await live.messages(sessionID)
      const person = messages.find((m) => isRealUser(m) && textOf(m).startsWith("USER_SAYS"))
      expect(answer.info.parentID).toBe(person?.info.id ?? "-")
      expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
      // The race happened: ours was stored after the person's message was created, so theirs was moved.
      const log = live.pluginLog().join("\n")
      expect(log).toMatch(/"a person's message moved after monitor output created as they wrote".*batchSeq=1 /)
      // Our prompt, sent once, comes before the person's message.
      const [first, ...rest] = await live.envelopes(sessionID)
      expect(rest).toEqual([])
      expect(first?.text).toContain("first line")
      expect(first?.message.info.time.created).toBeLessThan(person?.info.time.created ?? 0)
      expect(log.match(/"sent monitor output"/g)).toHaveLength(1)
      if (report) {
        expect(first?.status).toBe(report)
        // opencode answers the exit notice in a step of its own when that turn first read the session before
        // the person's message was stored; later, the person's turn has it in view, just before their message.
        const reported = messages.find((m) => m.info.role === "assistant" && m.info.parentID === first?.message.info.id)
        if (reported)
          expect(textOf(reported)).toBe(
            exitReport({ monitorId: first?.monitorId ?? "-", label: "chatty", status: report }),
          )
      }
      expect((await live.stop()).leftovers).toEqual([])
    })
  },
  90_000,
)
