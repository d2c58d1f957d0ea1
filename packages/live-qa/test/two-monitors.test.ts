// test-runner: about 32 s (scripts/test.ts starts the longest first)
/**
 * Scenario 7: one session starts two monitors that exit close together. Every envelope is
 * delivered exactly once and in order per monitor, both exit notices arrive, and the agent
 * reports both exit codes.
 */
import { afterEach, expect, test } from "bun:test"
import { exitReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import { type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import {
  after,
  deliveriesLogged,
  explained,
  isAssistant,
  planPrompt,
  waitForExitNoticesDelivered,
  waitForReply,
} from "../src/scenario.ts"
import { textOf, waitFor, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})

const PROMPT = planPrompt(
  "Run both jobs.",
  [
    ["monitor_start", { command: "echo one-line; sleep 1; exit 1", label: "one" }],
    ["monitor_start", { command: "echo two-line; sleep 1.2; exit 2", label: "two" }],
  ],
  "Both jobs started.",
)

test("two monitors: every envelope once and in order, both exits reported", async () => {
  // A short flush interval gives each monitor an observation before its exit notice.
  const live = await startMonitorQA({ pluginOptions: { flush_interval_ms: 250 } })
  qa = live
  const sessionID = await live.newSession()
  await live.prompt(sessionID, PROMPT)
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
