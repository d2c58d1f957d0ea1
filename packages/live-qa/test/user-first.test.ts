// test-runner: about 45 s (scripts/test.ts starts the longest first)
/**
 * Scenario 3: a person's message arrives just before the monitor exits, and the model is slow to
 * answer it. The person's turn runs first and completes; only then does the exit notice land and
 * wake the session. Exactly one terminal envelope: nothing doubled, nothing lost.
 * And a prompt of ours stored between a person's message being created and stored (its send was on
 * its way as they wrote) comes before their message: their turn answers them.
 */
import { expect, test } from "bun:test"
import { join, resolve } from "node:path"
import { exitReport, monitorAgent, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
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
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { sleep, textOf, waitForIdle } from "../src/timeline.ts"

const RACE_PLUGIN = resolve(import.meta.dir, "../src/person-race-plugin.ts")

// The tests are projects of one server: each its own opencode.json and scripted model.
const shared = serverPerFile()

const PROMPT = planPrompt(
  "Watch this job.",
  [["monitor_start", { command: "sleep 2; exit 5", label: "late" }]],
  "Watching it.",
)

test("user first: a person's turn that is running when the monitor exits completes before the wake", async () => {
  // Only the answer to the person is slow (3 s): their turn is still running when the monitor exits.
  const live = await shared.project({ script: monitorAgent({ userSaysDelayMs: 3000 }) })
  const sessionID = await live.newSession()
  await live.prompt(sessionID, PROMPT)
  const said = await waitForReply(live, sessionID, "", (t) => t === "Watching it.", "the agent to finish its turn")
  const startStep = stepWithTool(await live.messages(sessionID), "monitor_start")
  const startedAt = startStep?.parts.find((p) => p.tool === "monitor_start")?.state?.time?.end ?? Number.NaN

  // The person speaks about 1.8 s after the monitor started, just before its exit at 2 s.
  const wait = startedAt + 1800 - Date.now()
  expect(wait).toBeGreaterThan(0)
  await sleep(wait)
  const userSentAt = await live.prompt(sessionID, "USER_SAYS hello")
  const ended = await live.server.waitForLog(/"monitor ended".*status="exited \(code=5\)"/, 10_000)

  const wake = await waitForEnvelope(live, sessionID, (e) => e.status !== "running", "the terminal envelope")
  const reply = await waitForReply(
    live,
    sessionID,
    wake.message.info.id,
    (t) => t.includes("exit code 5"),
    "the report of exit code 5",
  )
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  // The exit notice logged as delivered: nothing of the monitor is left to send.
  await waitForExitNoticesDelivered(live, [wake.monitorId])

  await explained(live, { session: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    const person = messages.filter(isRealUser)
    expect(person.map((m) => textOf(m))).toEqual([PROMPT, "USER_SAYS hello"])
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
