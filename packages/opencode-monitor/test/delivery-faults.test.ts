import { describe, expect, test } from "bun:test"
import { defaultMonitorConfig } from "../src/config"
import type { InjectorOptions } from "../src/delivery/injector"
import type { OutputBatch } from "../src/pipeline/batcher"
import { createMonitorPlugin } from "../src/plugin"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi, settle } from "./support/fake-session-api"
import { setupInjector } from "./support/injector-setup"

// Delivery when the server fails, and the identity of a wake.
const S = "ses_faults"
const PLAN = { agent: "plan", model: { providerID: "mock", modelID: "m-plan" } }

function terminalBatch(monitorId = "mon_f"): OutputBatch {
  return {
    monitorId,
    batchSeq: 2,
    lines: [],
    stillRunning: false,
    status: { kind: "exited", code: 0 },
    dropped: { matched: 0, unmatched: 0, bytes: 0 },
    bytes: 0,
  }
}

function setup(options: Partial<InjectorOptions> = {}) {
  const base = setupInjector(options)
  const wake = (b: OutputBatch) => base.injector.enqueue(b, { sessionID: S, wake: true }, "faulty")
  return { ...base, wake }
}

describe("no duplicate wake after an ambiguous failure", () => {
  test("a forced wake whose send was ambiguous is not sent again while the history cannot be read", async () => {
    const { api, injector, advance, wake } = setup({ max_active_defer_ms: 1_000 })
    api.busy[S] = "busy"
    api.failures = [{ kind: "ambiguous", stored: true }]
    wake(terminalBatch())
    await advance(1_100) // the ceiling forces the send; it lands but the answer is lost
    expect(api.promptCalls).toHaveLength(1)
    api.historyFails = true
    await advance(30_000)
    expect(api.sent).toHaveLength(1)
    api.historyFails = false
    await advance(60_000)
    expect(api.sent).toHaveLength(1)
    expect(injector.pending(S)).toHaveLength(0)
  })

  test("an ambiguous send is re-checked, never resent, when only the verifying history read fails", async () => {
    const { api, injector, advance, wake } = setup()
    api.failures = [{ kind: "ambiguous", stored: true }]
    // Every second history read fails: a gate read may pass while the check of the history does not.
    api.historyFails = (read) => read % 2 === 0
    wake(terminalBatch())
    await advance(60_000)
    expect(api.sent).toHaveLength(1)
    expect(injector.pending(S)).toHaveLength(0)
  })
})

describe("a wake is not abandoned after a short outage", () => {
  test("a forced wake survives a minute of failed sends, retried no faster than pending_retry_ms", async () => {
    const { api, injector, advance, wake, gaveUp } = setup({ max_active_defer_ms: 1_000 })
    api.busy[S] = "busy"
    api.failures = Array.from({ length: 12 }, () => ({ kind: "rejected" as const }))
    wake(terminalBatch())
    await advance(15 * 60_000)
    expect(gaveUp).toEqual([])
    expect(api.sent).toHaveLength(1)
    expect(injector.pending(S)).toHaveLength(0)
    const gaps = api.promptCalls.slice(1).map((call, i) => call.at - (api.promptCalls[i]?.at ?? 0))
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(1_000)
  })

  test("an idle session's wake survives a minute of failed sends", async () => {
    const { api, advance, wake, gaveUp } = setup()
    api.failures = Array.from({ length: 12 }, () => ({ kind: "rejected" as const }))
    wake(terminalBatch())
    await advance(15 * 60_000)
    expect(gaveUp).toEqual([])
    expect(api.sent).toHaveLength(1)
  })
})

/** The whole plugin on a fake clock and session API (the clock well past 0). */
function pluginOnFakes() {
  const scheduler = new FakeScheduler()
  const api = new FakeSessionApi(() => scheduler.now())
  scheduler.advance(1_000_000)
  const instance = createMonitorPlugin(defaultMonitorConfig(), { api, scheduler })
  api.onCreated = (sessionID, key, created) => instance.router.injector.onOwnMessage(sessionID, key, created)
  return { scheduler, api, instance }
}

describe("a wake that cannot be delivered for 30 minutes", () => {
  test("every failed send logs a warn line; the give-up logs an error and a toast names the monitor and its label", async () => {
    const { scheduler, api, instance } = pluginOnFakes()
    api.failures = Array.from({ length: 1_000 }, () => ({ kind: "rejected" as const }))
    instance.router.route(terminalBatch(), { sessionID: S, label: "faulty", hasPattern: false, wakeLimit: 0 })
    const run = async (ms: number) => {
      for (let t = 0; t < ms; t += 1_000) {
        scheduler.advance(1_000)
        await settle()
      }
    }
    await run(29 * 60_000)
    const warned = api.logs.filter((l) => l.message === "monitor output send failed; will retry")
    expect(warned.length).toBeGreaterThan(1)
    expect(warned[0]).toMatchObject({ level: "warn", extra: { monitorId: "mon_f", label: "faulty", kind: "rejected" } })
    expect(api.toasts).toEqual([])
    await run(2 * 60_000)
    expect(api.sent).toHaveLength(0)
    expect(api.logs.filter((l) => l.level === "error").map((l) => l.extra)).toMatchObject([
      { monitorId: "mon_f", label: "faulty" },
    ])
    expect(api.toasts).toHaveLength(1)
    expect(api.toasts[0]).toMatchObject({ variant: "error", title: "opencode-monitor: wake not delivered" })
    expect(api.toasts[0]?.message).toContain("faulty (mon_f)")
    await instance.hooks.dispose?.()
  })
})

describe("the wake keeps the agent and model however far back the person's message is", () => {
  for (const observations of [200, 1_000]) {
    test(`the latest real user message is found behind ${observations} observations, with an idle queue in between`, async () => {
      const { api, advance, wake } = setup()
      api.addMessage(S, { role: "user", ...PLAN, text: "watch the build" })
      api.addMessage(S, { role: "assistant", agent: "plan" })
      await advance(10_000)
      for (let i = 0; i < observations; i++)
        api.addMessage(S, { role: "user", synthetic: true, text: `observation ${i}` })
      await advance(10_000)
      wake(terminalBatch())
      await advance(5_000)
      expect(api.sent).toHaveLength(1)
      expect(api.sent[0]).toMatchObject(PLAN)
    })
  }
})

describe("identity from what the plugin sees", () => {
  test("chat.message keeps the person's agent and model per session; injected messages never replace it", async () => {
    const { scheduler, api, instance } = pluginOnFakes()
    const chat = (agent: string, synthetic: boolean) =>
      instance.hooks["chat.message"]?.({ sessionID: S, agent, model: PLAN.model }, {
        message: { agent, model: PLAN.model, time: { created: scheduler.now() } },
        parts: [{ type: "text", text: "x", synthetic }],
      } as never)
    await chat("plan", false)
    await chat("build", true) // an injected message, stamped by whoever sent it
    // Past user_message_window_ms: the person's message no longer holds the exit notice back.
    scheduler.advance(defaultMonitorConfig().user_message_window_ms)
    // The history is gone from view (compacted, or unreadable): the identity seen is what counts.
    api.historyFails = (read) => read > 1
    instance.router.injector.enqueue(terminalBatch(), { sessionID: S, wake: true }, "t")
    for (let i = 0; i < 100; i++) {
      scheduler.advance(50)
      await settle()
    }
    expect(api.sent.map((p) => [p.agent, p.model])).toEqual([["plan", PLAN.model]])
    await instance.hooks.dispose?.()
  })

  test("a wake whose identity cannot be read waits instead of going out without an agent", async () => {
    const { api, advance, wake } = setup()
    for (let i = 0; i < 100; i++) api.addMessage(S, { role: "user", synthetic: true, text: `observation ${i}` })
    api.historyFails = (read) => read > 1 // the gate read passes, reading further back fails
    wake(terminalBatch())
    await advance(10_000)
    expect(api.promptCalls).toEqual([])
    api.historyFails = false
    await advance(60_000)
    expect(api.sent).toHaveLength(1)
  })
})

describe("state per monitor ends with the monitor", () => {
  test("after 100 monitors have come and gone the injector holds nothing of them", async () => {
    const { api, injector, advance } = setup({ user_message_window_ms: 0, post_dispatch_hold_ms: 1 })
    for (let m = 0; m < 100; m++) {
      const monitorId = `mon_${m.toString(16).padStart(8, "0")}`
      injector.enqueue(
        { ...terminalBatch(monitorId), batchSeq: 1, stillRunning: true, status: { kind: "running" } },
        { sessionID: S, wake: false },
        "t",
      )
      injector.enqueue(terminalBatch(monitorId), { sessionID: S, wake: true }, "t")
    }
    await advance(60_000)
    expect(api.sent).toHaveLength(200)
    const inside = injector as unknown as { sent: Set<string>; queues: Map<string, unknown> }
    expect(inside.sent.size).toBe(0)
    expect(inside.queues.size).toBe(0)
  })
})
