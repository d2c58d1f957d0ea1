import { describe, expect, test } from "bun:test"
import type { InjectorOptions } from "../src/delivery/injector"
import type { OutputBatch } from "../src/pipeline/batcher"
import { settle } from "./support/fake-session-api"
import { setupInjector, testBatch } from "./support/injector-setup"

const S = "ses_parent"

const batch = testBatch

function setup(options: Partial<InjectorOptions> = {}) {
  const base = setupInjector(options)
  const wake = { sessionID: S, wake: true }
  const observe = { sessionID: S, wake: false }
  const send = (b: OutputBatch) => base.injector.enqueue(b, b.stillRunning ? observe : wake, "qa-build")
  return { ...base, send }
}

describe("MonitorOutputInjector: the seed's regression set", () => {
  test("terminal batch dispatches as a reply-producing prompt", async () => {
    const { api, send } = setup()
    send(batch(2, { terminal: { kind: "exited", code: 7 } }))
    await settle()
    expect(api.sent).toHaveLength(1)
    expect(api.sent[0]?.noReply).toBe(false)
    // What the text says travels as data too: the text part's metadata.
    expect(api.sent[0]?.metadata).toEqual({
      "opencode-monitor": {
        key: "monitor-output:mon_1:batch-2",
        monitorId: "mon_1",
        batch: 2,
        label: "qa-build",
        status: { kind: "exited", code: 7 },
        wake: true,
      },
    })
    expect(api.sent[0]?.text).toContain("Status: exited (code=7)")
  })

  test("streaming batch stays a no-reply observation", async () => {
    const { api, send } = setup()
    send(batch(1))
    await settle()
    expect(api.sent.map((p) => p.noReply)).toEqual([true])
    expect(api.sent[0]?.metadata).toEqual({
      "opencode-monitor": {
        key: "monitor-output:mon_1:batch-1",
        monitorId: "mon_1",
        batch: 1,
        label: "qa-build",
        status: { kind: "running" },
        wake: false,
      },
    })
  })

  test("terminal batch over the active defer ceiling dispatches while the parent is busy", async () => {
    const { api, send, advance } = setup({ max_active_defer_ms: 60_000 })
    api.busy[S] = "busy"
    send(batch(1, { terminal: { kind: "exited", code: 7 } }))
    await advance(59_000)
    expect(api.sent).toHaveLength(0)
    await advance(1_500)
    expect(api.sent).toHaveLength(1)
    expect(api.sent[0]?.noReply).toBe(false)
    const forced = api.logs.find((l) => l.extra.forceActiveDispatch === true)
    expect(forced?.extra).toMatchObject({
      monitorId: "mon_1",
      batchSeq: 1,
      shouldReply: true,
      forceActiveDispatch: true,
    })
  })

  test("streaming batch is never force dispatched while the parent is busy", async () => {
    const { api, send, advance } = setup({ max_active_defer_ms: 1_000 })
    api.busy[S] = "busy"
    send(batch(1))
    await advance(120_000)
    expect(api.sent).toHaveLength(0)
  })

  test("over-ceiling terminal batch dispatches ahead of queued streaming batches", async () => {
    const { api, injector, send, advance } = setup({ max_active_defer_ms: 60_000 })
    api.busy[S] = "busy"
    send(batch(1))
    send(batch(2))
    send(batch(3, { terminal: { kind: "exited", code: 1 } }))
    await advance(61_000)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-3"])
    expect(injector.pending(S).map((d) => d.key)).toEqual([
      "monitor-output:mon_1:batch-1",
      "monitor-output:mon_1:batch-2",
    ])
  })

  test("ceiling is opt-in: nothing is sent after 600 s of busy without it", async () => {
    for (const max_active_defer_ms of [undefined, 0]) {
      const { api, send, advance } = setup({ max_active_defer_ms })
      api.busy[S] = "busy"
      send(batch(1, { terminal: { kind: "exited", code: 7 } }))
      await advance(600_000)
      expect(api.sent).toHaveLength(0)
    }
  })

  test("the ceiling counts from the first queue time, kept across requeues after failures", async () => {
    const { api, send, advance } = setup({ max_active_defer_ms: 10_000 })
    api.busy[S] = "busy"
    api.failures = [{ kind: "rejected" }]
    send(batch(1, { terminal: { kind: "exited", code: 2 } }))
    await advance(10_100)
    expect(api.sent).toHaveLength(0) // first forced attempt failed
    await advance(1_000)
    expect(api.sent).toHaveLength(1) // retried after pending_retry_ms, without waiting another 10 s
  })
})

describe("MonitorOutputInjector: gates", () => {
  test("a busy session gets nothing until it is idle again; session.idle triggers the re-check", async () => {
    const { api, injector, send } = setup()
    api.busy[S] = "busy"
    send(batch(1))
    await settle()
    expect(api.sent).toHaveLength(0)
    delete api.busy[S]
    injector.onSessionIdle(S)
    await settle()
    expect(api.sent).toHaveLength(1)
  })

  test("deferred batches are retried every pending_retry_ms even when no event comes", async () => {
    const { api, send, advance } = setup()
    api.busy[S] = "retry"
    send(batch(1))
    await advance(3_000)
    expect(api.sent).toHaveLength(0)
    delete api.busy[S]
    await advance(1_000)
    expect(api.sent).toHaveLength(1)
  })

  test("an unfinished assistant turn holds output back even when the status says idle", async () => {
    const { api, send, advance } = setup()
    api.addMessage(S, { role: "assistant", completed: undefined, finish: undefined })
    send(batch(1))
    await advance(2_000)
    expect(api.sent).toHaveLength(0)
    const deferral = api.logs.find((l) => l.message === "monitor output deferred")
    expect(deferral?.extra.reason).toBe("assistant turn still running")
  })

  test("a tool call still running holds output back", async () => {
    const { api, send, advance } = setup()
    api.addMessage(S, { role: "assistant", finish: "tool-calls", toolRunning: true })
    send(batch(1))
    await advance(2_000)
    expect(api.sent).toHaveLength(0)
  })

  test("a real user message within user_message_window_ms holds output back, then it goes", async () => {
    const { api, send, advance } = setup()
    api.addMessage(S, { role: "user", synthetic: false, text: "hi" })
    send(batch(1, { terminal: { kind: "exited", code: 0 } }))
    await advance(1_000)
    expect(api.sent).toHaveLength(0)
    await advance(1_500)
    expect(api.sent).toHaveLength(1)
  })

  test("a person's message that arrives while the gates read the session holds output back (chat.message, not the stale read)", async () => {
    const { api, injector, scheduler, send, advance } = setup()
    // opencode calls chat.message as it takes the person's prompt; the history read just taken misses it.
    api.afterHistoryRead = (sessionID) => {
      api.afterHistoryRead = undefined
      void injector.onPersonMessage(sessionID, scheduler.now())
      api.addMessage(sessionID, { role: "user", synthetic: false, text: "stop them" })
    }
    send(batch(1))
    send(batch(2, { terminal: { kind: "exited", code: 0 } }))
    await advance(1_000)
    expect(api.sent).toHaveLength(0)
    // After user_message_window_ms (2 s) both go, in order.
    await advance(2_500)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1", "monitor-output:mon_1:batch-2"])
  })

  test("a person's message is moved after an observation created between its creation and its storing", async () => {
    const { api, injector, scheduler, send, advance } = setup()
    // The person's message is created before the observation…
    const person = scheduler.now()
    send(batch(1))
    await advance(100)
    const observation = api.history.get(S)?.at(-1)?.created ?? Number.NaN
    expect(observation).toBeGreaterThan(person)
    // …and reaches chat.message after it: it is given a creation time after the observation's.
    expect(await injector.onPersonMessage(S, person)).toBe(observation + 1)
    expect(api.logs.map((l) => l.message)).toContain(
      "a person's message moved after monitor output created as they wrote",
    )
    // Nothing is sent twice.
    await advance(5_000)
    expect(api.sent).toHaveLength(1)
  })

  test("an exit notice still on its way when a person writes is waited for, and the person's message moved after it", async () => {
    const { api, injector, scheduler, send, advance } = setup()
    let land = () => {}
    api.promptGate = new Promise((resolve) => (land = resolve))
    send(batch(1, { terminal: { kind: "exited", code: 1 } }))
    await advance(100)
    expect(api.promptCalls).toHaveLength(1)
    const created = injector.onPersonMessage(S, scheduler.now())
    await advance(300)
    api.promptGate = undefined
    land()
    await settle()
    const wake = api.history.get(S)?.at(-1)
    expect(wake?.notes[0]?.wake).toBe(true)
    expect(await created).toBe((wake?.created ?? Number.NaN) + 1)
  })

  test("a send that failed ambiguously may still land: a person's message waits for it and is moved after it", async () => {
    const { api, injector, scheduler, send, advance } = setup()
    api.failures.push({ kind: "ambiguous" })
    send(batch(1, { terminal: { kind: "exited", code: 1 } }))
    await advance(100)
    const key = api.promptCalls[0]?.key ?? ""
    const created = injector.onPersonMessage(S, scheduler.now())
    // The reset hid a prompt opencode had taken: it is created now, and chat.message says so.
    await advance(300)
    const landedAt = scheduler.now()
    injector.onOwnMessage(S, key, landedAt)
    expect(await created).toBe(landedAt + 1)
  })

  test("a person's message created after our prompt, or while a send failed, keeps its time", async () => {
    const { api, injector, scheduler, send, advance } = setup()
    send(batch(1))
    await advance(100)
    const person = scheduler.now()
    expect(await injector.onPersonMessage(S, person)).toBe(person)
    api.failures.push({ kind: "rejected" })
    send(batch(2))
    // After user_message_window_ms.
    await advance(2_500)
    expect(api.promptCalls).toHaveLength(2)
    // Nothing was created: no wait, no move.
    expect(await injector.onPersonMessage(S, person)).toBe(person)
  })

  test("a wake past max_active_defer_ms is not held back by a person's message: the ceiling stands", async () => {
    const { api, injector, send, advance } = setup({ max_active_defer_ms: 60_000 })
    api.busy[S] = "busy"
    send(batch(1, { terminal: { kind: "exited", code: 1 } }))
    await advance(59_500)
    void injector.onPersonMessage(S, 0)
    expect(api.sent).toHaveLength(0)
    await advance(1_000)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1"])
  })

  test("an injected (synthetic) user message does not count as the user typing", async () => {
    const { api, send } = setup()
    api.addMessage(S, { role: "user", synthetic: true, text: "[OMO MONITOR OUTPUT] ..." })
    send(batch(1))
    await settle()
    expect(api.sent).toHaveLength(1)
  })

  test("post_dispatch_hold_ms keeps two monitors from sending into one idle gap", async () => {
    const { api, injector, advance } = setup()
    injector.enqueue(
      batch(1, { monitorId: "mon_a", terminal: { kind: "exited", code: 0 } }),
      { sessionID: S, wake: true },
      "a",
    )
    injector.enqueue(
      batch(1, { monitorId: "mon_b", terminal: { kind: "exited", code: 1 } }),
      { sessionID: S, wake: true },
      "b",
    )
    await settle()
    expect(api.sources()).toEqual(["monitor-output:mon_a:batch-1"])
    // The first wake made the session busy before the hold ran out: the second waits for idle.
    api.busy[S] = "busy"
    await advance(5_000)
    expect(api.sent).toHaveLength(1)
    delete api.busy[S]
    await advance(1_000)
    expect(api.sources()).toEqual(["monitor-output:mon_a:batch-1", "monitor-output:mon_b:batch-1"])
  })

  test("every prompt carries the agent and model of the latest real user message", async () => {
    const { api, send, advance } = setup()
    const model = { providerID: "mock", modelID: "slow" }
    api.addMessage(S, { role: "user", synthetic: false, agent: "plan", model })
    api.addMessage(S, { role: "assistant" })
    api.addMessage(S, { role: "user", synthetic: true, agent: "build", text: "injected" })
    await advance(3_000)
    send(batch(1))
    await advance(500)
    send(batch(2, { terminal: { kind: "exited", code: 0 } }))
    await advance(500)
    expect(api.sent.map((p) => [p.agent, p.model])).toEqual([
      ["plan", model],
      ["plan", model],
    ])
  })

  test("a session whose state cannot be read is retried, not written into blindly", async () => {
    const { api, send, advance } = setup()
    api.statusFails = true
    send(batch(1, { terminal: { kind: "exited", code: 0 } }))
    await advance(3_000)
    expect(api.sent).toHaveLength(0)
    api.statusFails = false
    await advance(1_000)
    expect(api.sent).toHaveLength(1)
  })
})

describe("MonitorOutputInjector: exactly once", () => {
  test("a failed send is retried and lands once", async () => {
    const { api, send, advance } = setup()
    api.failures = [{ kind: "rejected" }, { kind: "rejected" }]
    send(batch(1, { terminal: { kind: "exited", code: 0 } }))
    await advance(5_000)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1"])
  })

  test("an ambiguous failure that did reach the session is found in the history, not sent twice", async () => {
    const { api, send, advance } = setup()
    api.failures = [{ kind: "ambiguous", stored: true }]
    send(batch(1, { terminal: { kind: "exited", code: 0 } }))
    await advance(10_000)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1"])
    expect(api.logs.some((l) => l.message === "monitor output was already accepted")).toBe(true)
  })

  test("an ambiguous failure is found in the history when opencode's clock runs behind, within accepted_message_skew_ms", async () => {
    const base = setupInjector({}, undefined, -3_000) // the server stamps messages 3 s early
    const { api, advance } = base
    api.failures = [{ kind: "ambiguous", stored: true }]
    base.injector.enqueue(batch(1, { terminal: { kind: "exited", code: 0 } }), { sessionID: S, wake: true }, "x")
    await advance(20_000)
    expect(api.promptCalls).toHaveLength(1)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1"])
    expect(api.logs.some((l) => l.message === "monitor output was already accepted")).toBe(true)
  })

  test("an ambiguous failure that did not reach the session is sent again", async () => {
    const { api, send, advance } = setup()
    api.failures = [{ kind: "ambiguous" }]
    send(batch(1, { terminal: { kind: "exited", code: 0 } }))
    await advance(4_000)
    // Not sent again before an accepted prompt had accepted_message_skew_ms to show in the history.
    expect(api.promptCalls).toHaveLength(1)
    await advance(4_000)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1"])
  })

  test("the same batch enqueued twice is delivered once", async () => {
    const { api, send, advance } = setup()
    const b = batch(1)
    send(b)
    await advance(500)
    send(b)
    await advance(500)
    expect(api.sent).toHaveLength(1)
  })

  test("failed sends back off from pending_retry_ms, doubling, to at most 30 s between attempts", async () => {
    const { api, send, advance } = setup()
    api.failures = Array.from({ length: 12 }, () => ({ kind: "rejected" as const }))
    send(batch(1, { terminal: { kind: "exited", code: 1 } }))
    await advance(5 * 60_000)
    expect(api.sent).toHaveLength(1)
    const gaps = api.promptCalls.slice(1).map((call, i) => call.at - (api.promptCalls[i]?.at ?? 0))
    expect(gaps).toHaveLength(12)
    // The clock moves in 50 ms steps: a gap is measured to within one step.
    const step = (gap: number) => Math.floor(gap / 50) * 50
    expect(gaps.slice(0, 5).map(step)).toEqual([1_000, 2_000, 4_000, 8_000, 16_000])
    expect(step(Math.max(...gaps))).toBe(30_000)
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(1_000)
  })

  test("a wake that keeps failing is given up only after 30 minutes, with a log naming the monitor and the give-up hook", async () => {
    const { scheduler, api, injector, gaveUp } = setupInjector({
      user_message_window_ms: 0,
      pending_retry_ms: 100,
      post_dispatch_hold_ms: 10,
      accepted_message_skew_ms: 0,
    })
    api.failures = Array.from({ length: 1_000 }, () => ({ kind: "rejected" as const }))
    injector.enqueue(batch(1, { terminal: { kind: "exited", code: 1 } }), { sessionID: S, wake: true }, "x")
    const run = async (ms: number) => {
      for (let t = 0; t < ms; t += 1_000) {
        scheduler.advance(1_000)
        await settle()
      }
    }
    await run(29 * 60_000)
    expect(gaveUp).toEqual([])
    // Backed off to one attempt every 30 s at most, never faster than pending_retry_ms.
    expect(api.promptCalls.length).toBeLessThan(80)
    await run(2 * 60_000)
    expect(gaveUp).toEqual(["monitor-output:mon_1:batch-1"])
    expect(injector.pending(S)).toHaveLength(0)
    const error = api.logs.find((l) => l.level === "error")
    expect(error?.extra).toMatchObject({ monitorId: "mon_1", label: "x" })
  })

  test("an observation that keeps failing is dropped after 8 attempts, without the wake's give-up hook", async () => {
    const { api, injector, send, advance } = setup()
    api.failures = Array.from({ length: 8 }, () => ({ kind: "rejected" as const }))
    send(batch(1))
    await advance(10 * 60_000)
    expect(api.promptCalls).toHaveLength(8)
    expect(injector.pending(S)).toHaveLength(0)
    expect(api.logs.some((l) => l.message.startsWith("monitor output could not be delivered"))).toBe(true)
  })

  test("a monitor stopped while a send is in flight gets no retries", async () => {
    const { api, injector, send, advance } = setup()
    let answer: (() => void) | undefined
    api.promptGate = new Promise<void>((resolve) => {
      answer = resolve
    })
    api.failures = [{ kind: "rejected" }]
    send(batch(2, { terminal: { kind: "exited", code: 0 } }))
    await settle()
    expect(api.promptCalls).toHaveLength(1) // in flight
    injector.forgetMonitor("mon_1")
    answer?.()
    await advance(60_000)
    expect(api.promptCalls).toHaveLength(1)
    expect(injector.pending(S)).toHaveLength(0)
  })

  test("a deleted session stops all retries for it", async () => {
    const { api, injector, send, advance } = setup()
    api.busy[S] = "busy"
    send(batch(1, { terminal: { kind: "exited", code: 0 } }))
    await advance(1_000)
    injector.forgetSession(S)
    delete api.busy[S]
    await advance(10_000)
    expect(api.sent).toHaveLength(0)
  })

  test("a session that is gone (404) drops its queue", async () => {
    const { api, injector, send, advance } = setup()
    api.failures = [{ kind: "gone" }]
    send(batch(1))
    send(batch(2))
    await advance(5_000)
    expect(api.sent).toHaveLength(0)
    expect(injector.pending(S)).toHaveLength(0)
  })
})

describe("MonitorOutputInjector: flood while busy", () => {
  test("waiting output stays bounded, the overflow is counted in dropped:, the terminal batch survives", async () => {
    const { api, send, advance } = setup({ batch_max_bytes: 1 << 19 })
    api.busy[S] = "busy"
    for (let seq = 1; seq <= 2_000; seq++) send(batch(seq, { lines: 50 }))
    send(batch(2_001, { terminal: { kind: "exited", code: 0 }, lines: 3 }))
    await advance(60_000)
    expect(api.sent).toHaveLength(0)
    delete api.busy[S]
    await advance(5_000)
    expect(api.sources()).toEqual([
      "monitor-output:mon_1:batch-1999",
      "monitor-output:mon_1:batch-2000",
      "monitor-output:mon_1:batch-2001",
    ])
    const first = api.sent[0]?.text ?? ""
    expect(first).toContain(`dropped: ${1998 * 50} matched, 0 unmatched (`)
    expect(api.sent[2]?.text).toContain("Status: exited (code=0)")
    expect(api.sent[2]?.noReply).toBe(false)
  })
})
