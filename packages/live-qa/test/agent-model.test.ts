// test-runner: about 32 s (scripts/test.ts starts the longest first)
/**
 * Scenario 4: a session on the `plan` agent with a model that is not the default. Every envelope
 * the plugin injects carries that agent and model, so neither the observations nor the wake
 * switch the session to `build` or to the default model.
 */
import { afterEach, expect, test } from "bun:test"
import { exitReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import { type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import { explained, isAssistant, isRealUser, planPrompt, waitForEnvelope, waitForReply } from "../src/scenario.ts"
import { textOf, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})

const M2 = { providerID: "mock", modelID: "m2" }
const PROMPT = planPrompt(
  "Plan it while the check runs.",
  [["monitor_start", { command: "echo plan-line; sleep 1; exit 4", label: "check" }]],
  "Planning while the check runs.",
)

test("agent and model: a plan session on mock/m2 stays plan and mock/m2 through observations and the wake", async () => {
  const live = await startMonitorQA({
    // A short flush interval gives one observation before the terminal batch.
    pluginOptions: { flush_interval_ms: 250 },
    config: {
      // Deep-merged into the generated provider: mock keeps "m" (the default) and gains "m2".
      provider: { mock: { models: { m2: { name: "m2", tool_call: true, limit: { context: 128000, output: 4096 } } } } },
    },
  })
  qa = live
  const sessionID = await live.newSession()
  await live.prompt(sessionID, PROMPT, { agent: "plan", model: M2 })
  const wake = await waitForEnvelope(live, sessionID, (e) => e.status !== "running", "the terminal envelope")
  const reply = await waitForReply(
    live,
    sessionID,
    wake.message.info.id,
    (t) => t.includes("exit code 4"),
    "the report of exit code 4",
  )
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

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
