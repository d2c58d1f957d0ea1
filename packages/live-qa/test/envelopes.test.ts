// test-runner: about 60 s (scripts/test.ts starts the longest first)
/**
 * What the envelopes of a session carry, on a real opencode serve:
 * (1) scenario 7: one session starts two monitors that exit close together. Every envelope is
 *     delivered exactly once and in order per monitor, both exit notices arrive, and the agent
 *     reports both exit codes;
 * (2) scenario 4: a session on the `plan` agent with a model that is not the default. Every
 *     envelope the plugin injects carries that agent and model, so neither the observations nor
 *     the wake switch the session to `build` or to the default model.
 * Each test is a project of one shared server (a project costs the server about a third of a
 * server of its own).
 */
import { expect, test } from "bun:test"
import { exitReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import {
  after,
  deliveriesLogged,
  explained,
  isAssistant,
  isRealUser,
  planPrompt,
  waitForExitNoticesDelivered,
  waitForReply,
  waitForWake,
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { textOf, waitFor, waitForIdle } from "../src/timeline.ts"

const shared = serverPerFile()

const TWO_JOBS = planPrompt(
  "Run both jobs.",
  [
    ["monitor_start", { command: "echo one-line; sleep 1; exit 1", label: "one" }],
    ["monitor_start", { command: "echo two-line; sleep 1.2; exit 2", label: "two" }],
  ],
  "Both jobs started.",
)

test("two monitors: every envelope once and in order, both exits reported", async () => {
  // A short flush interval gives each monitor an observation before its exit notice.
  const live = await shared.project({ pluginOptions: { flush_interval_ms: 250 } })
  const sessionID = await live.newSession()
  await live.prompt(sessionID, TWO_JOBS)
  const terminals = await waitFor(
    async () => {
      const found = (await live.envelopes(sessionID)).filter((e) => e.status !== "running")
      return found.length >= 2 ? found : undefined
    },
    30_000,
    100,
    "both terminal envelopes",
  )
  for (const t of terminals) {
    await waitForReply(
      live,
      sessionID,
      t.message.info.id,
      (text) => text.includes(t.status.replace(/^exited \(code=(\d+)\)$/, "exit code $1")),
      `the report of ${t.status}`,
    )
  }
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  // Both exit notices logged as delivered: nothing of either monitor is left to send.
  await waitForExitNoticesDelivered(
    live,
    terminals.map((t) => t.monitorId),
  )

  await explained(live, { session: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    const envelopes = await live.envelopes(sessionID)
    // Exactly once: no (monitor, batch) pair twice, four envelopes in all.
    const keys = envelopes.map((e) => `${e.monitorId}:${e.batch}`)
    expect(new Set(keys).size).toBe(keys.length)
    expect(envelopes).toHaveLength(4)
    // And the plugin sent each of them once (a resend would be a second log line for its key).
    expect([...deliveriesLogged(live).entries()].sort()).toEqual(
      keys.map((k): [string, number] => [`monitor-output:${k.replace(":", ":batch-")}`, 1]).sort(),
    )
    // Per monitor, in session order: its observation, then its exit notice.
    const byLabel = (label: string) => envelopes.filter((e) => e.text.includes(`\ncommand_label: ${label}\n`))
    const expected = { one: "exited (code=1)", two: "exited (code=2)" }
    for (const [label, status] of Object.entries(expected)) {
      const own = byLabel(label)
      expect(own.map((e) => [e.batch, e.status])).toEqual([
        [1, "running"],
        [2, status],
      ])
      expect(own[0]?.text).toContain(`[stdout seq=1] ${label}-line`)
      expect(new Set(own.map((e) => e.monitorId)).size).toBe(1)
    }
    const one = byLabel("one")[1]
    const two = byLabel("two")[1]
    expect(one?.monitorId).not.toBe(two?.monitorId)
    const reports = [one, two].map((t) =>
      exitReport({ monitorId: t?.monitorId ?? "", label: t === one ? "one" : "two", status: t?.status ?? "" }),
    )

    // The agent answered both exits: either one wake each, or one turn that covers both.
    const terminalIds = [one?.message.info.id, two?.message.info.id]
    const replies = messages.filter((m) => isAssistant(m) && terminalIds.includes(m.info.parentID))
    if (replies.length === 2) {
      expect(replies.map((m) => [m.info.parentID, textOf(m)])).toEqual([
        [one?.message.info.id, reports[0]],
        [two?.message.info.id, reports[1]],
      ])
    } else {
      expect(replies).toHaveLength(1)
      for (const report of reports) expect(textOf(replies[0])).toContain(report)
    }
    // Nothing else was answered, the plan's own turn aside.
    const said = messages.find((m) => isAssistant(m) && textOf(m) === "Both jobs started.")
    expect(
      after(messages, said?.info.id ?? "")
        .filter(isAssistant)
        .map((m) => m.info.id),
    ).toEqual(replies.map((m) => m.info.id))
    expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
    expect(messages.at(-1)?.info.role).toBe("assistant")

    // The plugin sent four deliveries, each key once.
    const sent = live.pluginLog().filter((line) => line.includes('"sent monitor output"'))
    const sources = sent.map((line) => line.match(/source=(\S+)/)?.[1])
    expect(sources).toHaveLength(4)
    expect(new Set(sources).size).toBe(4)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 90_000)

const M2 = { providerID: "mock", modelID: "m2" }
const PLAN_WHILE_CHECK = planPrompt(
  "Plan it while the check runs.",
  [["monitor_start", { command: "echo plan-line; sleep 1; exit 4", label: "check" }]],
  "Planning while the check runs.",
)

test("agent and model: a plan session on mock/m2 stays plan and mock/m2 through observations and the wake", async () => {
  const live = await shared.project({
    // A short flush interval gives one observation before the terminal batch.
    pluginOptions: { flush_interval_ms: 250 },
    config: {
      // The project's opencode.json, deep-merged by opencode over the server's provider: mock keeps
      // "m" (the default) and gains "m2".
      provider: { mock: { models: { m2: { name: "m2", tool_call: true, limit: { context: 128000, output: 4096 } } } } },
    },
  })
  const sessionID = await live.newSession()
  await live.prompt(sessionID, PLAN_WHILE_CHECK, { agent: "plan", model: M2 })
  const { envelope: wake, reply } = await waitForWake(
    live,
    sessionID,
    (e) => e.status !== "running",
    (t) => t.includes("exit code 4"),
    "the terminal envelope",
  )

  await explained(live, { session: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    const envelopes = await live.envelopes(sessionID)
    expect(envelopes.map((e) => [e.batch, e.status])).toEqual([
      [1, "running"],
      [2, "exited (code=4)"],
    ])
    expect(envelopes[0]?.text).toContain("[stdout seq=1] plan-line")
    for (const e of envelopes) {
      expect(e.message.info.agent).toBe("plan")
      expect(e.message.info.model).toEqual(M2)
    }
    // Every user message, typed or injected, is plan on mock/m2.
    const users = messages.filter((m) => m.info.role === "user")
    expect(users).toHaveLength(3)
    expect(users.filter(isRealUser)).toHaveLength(1)
    for (const m of users) expect([m.info.agent, m.info.model]).toEqual(["plan", M2])

    // Every assistant message, the woken turn included, ran as plan on mock/m2.
    const assistants = messages.filter(isAssistant)
    expect(assistants.map((m) => m.info.finish)).toEqual(["tool-calls", "stop", "stop"])
    expect(assistants.at(-1)?.info.id).toBe(reply.info.id)
    for (const m of assistants) {
      expect([m.info.agent, m.info.mode, m.info.providerID, m.info.modelID]).toEqual(["plan", "plan", "mock", "m2"])
    }
    expect(textOf(reply)).toBe(exitReport({ monitorId: wake.monitorId, label: "check", status: "exited (code=4)" }))
    expect(reply.info.parentID).toBe(wake.message.info.id)
    // The model server saw only m2, for every agent step.
    expect(live.model.scripted().map((r) => r.request.model)).toEqual(["m2", "m2", "m2"])
    expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 90_000)
