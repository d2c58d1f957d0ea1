import { describe, expect, test } from "bun:test"
import { defaultMonitorConfig } from "../src/config"
import { ObservationBudget } from "../src/delivery/budget"
import { ContextLedger } from "../src/delivery/context-ledger"
import type { InjectorOptions } from "../src/delivery/injector"
import { DeliveryRouter } from "../src/delivery/router"
import { routeBatch } from "../src/delivery/session-source"
import type { OutputBatch } from "../src/pipeline/batcher"
import { compileLineFilter } from "../src/pipeline/filter"
import { lineText } from "../src/pipeline/line"
import { createMonitorPipeline } from "../src/pipeline/pipeline"
import { SilenceWatch } from "../src/pipeline/silence-watch"
import type { Scheduler } from "../src/scheduler"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi, settle } from "./support/fake-session-api"
import { setupInjector, testBatch } from "./support/injector-setup"

const enc = new TextEncoder()
const S = "ses_parent"

/** A scheduler that counts the timers set on it. */
function counting(scheduler: FakeScheduler): Scheduler & { armed: number } {
  const counted = {
    armed: 0,
    now: () => scheduler.now(),
    setTimeout(callback: () => void, ms: number) {
      counted.armed++
      return scheduler.setTimeout(callback, ms)
    },
    clearTimeout: (handle: Parameters<Scheduler["clearTimeout"]>[0]) => scheduler.clearTimeout(handle),
  }
  return counted
}

function pipeline(silenceMs: number | undefined, scheduler: Scheduler = new FakeScheduler()) {
  const batches: OutputBatch[] = []
  const p = createMonitorPipeline({
    monitorId: "mon_s",
    config: {
      batch_max_lines: 50,
      batch_max_bytes: 16_384,
      flush_interval_ms: 1_000,
      ring_max_lines: 100,
      line_max_bytes: 8_192,
      wake_settle_ms: 0,
    },
    filter: undefined,
    silenceMs,
    scheduler,
    onBatch: (b) => batches.push(b),
  })
  return { p, batches, silences: () => batches.filter((b) => b.silence) }
}

describe("SilenceWatch on the fake clock", () => {
  test("silence resets on every line: a monitor printing every 900 ms never goes silent at 1000 ms", () => {
    const scheduler = new FakeScheduler()
    const { p, silences } = pipeline(1_000, scheduler)
    for (let i = 0; i < 50; i++) {
      scheduler.advance(900)
      p.push("stdout", enc.encode(`tick ${i}\n`))
    }
    expect(silences()).toEqual([])
    scheduler.advance(999)
    expect(silences()).toEqual([])
    scheduler.advance(1)
    expect(silences()).toHaveLength(1)
  })

  test("one wake per silence, and each later silence must last twice as long to wake", () => {
    const scheduler = new FakeScheduler()
    const { p, silences } = pipeline(5_000, scheduler)
    p.push("stdout", enc.encode("a\nb\n"))
    scheduler.advance(60_000)
    expect(silences()).toHaveLength(1)
    expect(silences()[0]?.silence).toMatchObject({ silentMs: 5_000, lastSeq: 2 })
    expect(silences()[0]?.silence?.lines.map((l) => lineText(l))).toEqual(["a", "b"])
    p.push("stderr", enc.encode("c\n"))
    scheduler.advance(9_999)
    expect(silences()).toHaveLength(1)
    scheduler.advance(1)
    expect(silences()).toHaveLength(2)
    expect(silences()[1]?.silence).toMatchObject({ silentMs: 10_000, lastSeq: 3 })
    p.push("stderr", enc.encode("d\n"))
    scheduler.advance(19_999)
    expect(silences()).toHaveLength(2)
    scheduler.advance(1)
    expect(silences()[2]?.silence).toMatchObject({ silentMs: 20_000, lastSeq: 4 })
    scheduler.advance(600_000)
    expect(silences()).toHaveLength(3)
  })

  test("a silence wake shows only lines that were delivered, never one match_pattern filtered out", async () => {
    const scheduler = new FakeScheduler()
    const batches: OutputBatch[] = []
    const p = createMonitorPipeline({
      monitorId: "mon_s",
      config: { ...defaultMonitorConfig(), wake_settle_ms: 0 },
      filter: await compileLineFilter("ERR", 512),
      silenceMs: 1_000,
      scheduler,
      onBatch: (b) => batches.push(b),
    })
    p.push("stdout", enc.encode("noise 1\nERR one\nnoise 2\nERR two\nnoise 3\n"))
    scheduler.advance(2_000)
    const silence = batches.find((b) => b.silence)?.silence
    expect(silence?.lines.map((l) => lineText(l))).toEqual(["ERR one", "ERR two"])
    expect(silence?.lastSeq).toBe(5)
  })

  test("a partial line is output too: bytes without a newline reset the silence", () => {
    const scheduler = new FakeScheduler()
    const { p, silences } = pipeline(1_000, scheduler)
    scheduler.advance(800)
    p.push("stdout", enc.encode("progress 10%"))
    scheduler.advance(800)
    expect(silences()).toEqual([])
    scheduler.advance(200)
    expect(silences()[0]?.silence?.lastSeq).toBe(0)
  })

  test("a chatty monitor costs no timer per line: 10 000 lines over 10 s arm at most one timer per silence period", () => {
    const fake = new FakeScheduler()
    const scheduler = counting(fake)
    let fired = 0
    const watch = new SilenceWatch(1_000, scheduler, () => fired++)
    for (let i = 0; i < 10_000; i++) {
      if (i % 1_000 === 0) fake.advance(999)
      watch.output()
    }
    expect(fired).toBe(0)
    expect(scheduler.armed).toBeLessThanOrEqual(11)
    expect(fake.pendingTimers).toBe(1)
  })

  test("the silence wake is its own running batch after the buffered lines, with the next batchSeq", () => {
    const scheduler = new FakeScheduler()
    const { p, batches } = pipeline(1_000, scheduler)
    p.push("stdout", enc.encode("one\n"))
    scheduler.advance(1_000)
    expect(batches.map((b) => [b.batchSeq, b.lines.map((l) => lineText(l)), b.stillRunning, !!b.silence])).toEqual([
      [1, ["one"], true, false],
      [2, [], true, true],
    ])
  })

  test("no silence wake once the process ended, nor after a stop, nor without wake_on_silence_ms", () => {
    const scheduler = new FakeScheduler()
    const ended = pipeline(1_000, scheduler)
    ended.p.processEnded()
    const closed = pipeline(1_000, scheduler)
    closed.p.close()
    const none = pipeline(undefined, scheduler)
    expect(scheduler.pendingTimers).toBe(0)
    scheduler.advance(10_000)
    expect([...ended.silences(), ...closed.silences(), ...none.silences()]).toEqual([])
  })

  test("stop() clears its timer", () => {
    const scheduler = new FakeScheduler()
    let fired = 0
    const watch = new SilenceWatch(1_000, scheduler, () => fired++)
    expect(scheduler.pendingTimers).toBe(1)
    watch.stop()
    expect(scheduler.pendingTimers).toBe(0)
    watch.output()
    scheduler.advance(5_000)
    expect(fired).toBe(0)
  })
})

const silenceBatch = (seq: number, lastSeq = 100): OutputBatch => ({
  ...testBatch(seq, { lines: 0 }),
  silence: { silentMs: 30_000, lastSeq, lines: testBatch(1, { lines: 2 }).lines },
})

function setup(options: Partial<InjectorOptions> = {}) {
  const base = setupInjector({
    max_active_defer_ms: 60_000,
    wake_min_interval_ms: 10_000,
    max_match_wakes_per_minute: 6,
    ...options,
  })
  const send = (b: OutputBatch, wakeLimit = 1) =>
    base.injector.enqueue(b, routeBatch({ kind: "primary" }, S, b, "parent")[0] as never, "dev", wakeLimit)
  const wakes = () => base.api.sent.filter((p) => !p.noReply)
  return { ...base, send, wakes }
}

describe("silence wake delivery", () => {
  test("a reply-wanting prompt with the wake: header, Status running and the last retained lines", async () => {
    const { send, wakes, api } = setup()
    send(silenceBatch(2))
    await settle()
    const text = wakes()[0]?.text ?? ""
    expect(text).toContain(
      "\nstream_policy: untrusted_observation\nwake: no output for 30000 ms (last output at seq=100)\n",
    )
    expect(text).toContain("[stdout seq=100] line 1.0\n[stdout seq=101] line 1.1\n\nStatus: running\n")
    expect(api.logs.find((l) => l.message === "sent monitor output")?.extra).toMatchObject({
      shouldReply: true,
      matchWake: "silence",
    })
  })

  test("it waits for the session's gates like any wake: never into a busy session before the ceiling", async () => {
    const { send, wakes, api, advance, injector } = setup({ max_active_defer_ms: 0 })
    api.busy[S] = "busy"
    send(silenceBatch(2))
    await advance(60_000)
    expect(wakes()).toHaveLength(0)
    delete api.busy[S]
    injector.onSessionIdle(S)
    await settle()
    expect(wakes()).toHaveLength(1)
  })

  test("it shares wake_min_interval_ms with match wakes, but not wake_limit", async () => {
    const { send, wakes, advance } = setup()
    send(testBatch(1, { wakeAt: [0] }), 1)
    await settle()
    send(silenceBatch(2))
    await advance(9_000)
    expect(wakes()).toHaveLength(1)
    await advance(1_500)
    expect(wakes().map((w) => w.text.match(/\nwake: (.*)\n/)?.[1])).toEqual([
      "line matched wake_pattern (1 of 1) at seq=100",
      "no output for 30000 ms (last output at seq=100)",
    ])
  })

  test("it shares max_match_wakes_per_minute with match wakes of other monitors", async () => {
    const { send, wakes, advance } = setup({
      wake_min_interval_ms: 1_000,
      max_match_wakes_per_minute: 1,
    })
    send(testBatch(1, { wakeAt: [0], monitorId: "mon_a" }))
    await settle()
    send(silenceBatch(1))
    await advance(30_000)
    expect(wakes()).toHaveLength(1)
    await advance(31_000)
    expect(wakes()).toHaveLength(2)
  })

  test("a waiting observation it absorbs shows each line once, in order", async () => {
    const { send, api, injector } = setup()
    api.busy[S] = "busy"
    const observation = testBatch(1, { lines: 2 })
    send(observation)
    send({ ...silenceBatch(2, 101), silence: { silentMs: 30_000, lastSeq: 101, lines: observation.lines } })
    delete api.busy[S]
    injector.onSessionIdle(S)
    await settle()
    expect(api.sent).toHaveLength(1)
    expect(api.sent[0]?.noReply).toBe(false)
    expect(api.sent[0]?.text.match(/\[stdout seq=\d+\]/g)).toEqual(["[stdout seq=100]", "[stdout seq=101]"])
  })
})

describe("silence wake routing", () => {
  const b = silenceBatch(3)
  test("a subagent's silence wake goes to the root only, naming the child", () => {
    expect(routeBatch({ kind: "subagent", parentID: "p", rootID: "root" }, "child", b, "parent")).toEqual([
      { sessionID: "root", wake: true, subagentSessionID: "child" },
    ])
  })
  test('with subagent_wake "off", or for automation, it goes nowhere', () => {
    expect(routeBatch({ kind: "subagent", parentID: "p", rootID: "root" }, "child", b, "off")).toEqual([])
    expect(routeBatch({ kind: "automation", agent: "bot" }, "s", b, "parent")).toEqual([])
  })
})

describe("silence wake and the observation budget", () => {
  test("a silence wake is never held back, even with observations off and no wake_pattern", () => {
    const scheduler = new FakeScheduler()
    const forwarded: { batch: OutputBatch; wake: boolean }[] = []
    const budget = new ObservationBudget(
      {
        observation_bytes_per_minute: 0,
        observation_burst_bytes: 1_024,
        observation_session_bytes: 1_024,
        observation_summary_interval_ms: 300_000,
      },
      {
        scheduler,
        forward: (batch, route) => forwarded.push({ batch, wake: route.wake }),
      },
    )
    const source = { label: "dev", hasPattern: false, wakeLimit: 0, matchWakeLeft: false }
    budget.admit(testBatch(1, { lines: 3 }), { sessionID: S, wake: false }, source)
    budget.admit(silenceBatch(2), { sessionID: S, wake: true }, source)
    expect(forwarded.map((f) => [f.batch.batchSeq, f.wake, !!f.batch.silence])).toEqual([[2, true, true]])
    expect(budget.spent(S)).toBe(0)
  })
})

describe("silence wakes stay within the session's budget", () => {
  test("a silence wake goes only while the session's total has room for it", () => {
    const scheduler = new FakeScheduler()
    const ledger = new ContextLedger()
    const forwarded: OutputBatch[] = []
    const budget = new ObservationBudget(
      {
        observation_bytes_per_minute: 4_096,
        observation_burst_bytes: 16_384,
        observation_session_bytes: 65_536,
        observation_summary_interval_ms: 300_000,
      },
      { scheduler, ledger, forward: (batch) => forwarded.push(batch) },
    )
    const source = { label: "dev", hasPattern: false, wakeLimit: 0, matchWakeLeft: false }
    budget.admit(silenceBatch(2), { sessionID: S, wake: true }, source)
    expect(forwarded).toHaveLength(1)
    // What earlier wakes put into the session, as the injector charges them: the total is spent.
    ledger.charge(S, 65_536 - 200)
    budget.admit(silenceBatch(3), { sessionID: S, wake: true }, source)
    expect(forwarded).toHaveLength(1)
    // A person wrote: the total starts afresh, and the next silence may wake again.
    budget.onUserTurn(S)
    budget.admit(silenceBatch(4), { sessionID: S, wake: true }, source)
    expect(forwarded.map((b) => b.batchSeq)).toEqual([2, 4])
  })

  test("8 idle hours of a job that prints a 1.6 KB line a little after every silence: a few wakes, within the session's budget", async () => {
    const config = defaultMonitorConfig()
    const scheduler = new FakeScheduler()
    const api = new FakeSessionApi(() => scheduler.now())
    api.addMessage(S, { role: "user", text: "start the watcher" })
    api.addMessage(S, { role: "assistant", text: "ok" })
    // The agent answers every reply-wanting prompt at once: its turn ends.
    const prompt = api.prompt.bind(api)
    api.prompt = async (session, request) => {
      await prompt(session, request)
      if (!request.noReply) api.addMessage(session, { role: "assistant", text: "noted" })
    }
    const router = new DeliveryRouter(config, { api, scheduler })
    const p = createMonitorPipeline({
      monitorId: "mon_spam",
      config,
      filter: undefined,
      silenceMs: 60_000,
      scheduler,
      onBatch: (b) => router.route(b, { sessionID: S, label: "job", hasPattern: false, wakeLimit: 0 }),
    })
    let n = 0
    const line = () => enc.encode(`${String(n++).padStart(6, "0")} ${"x".repeat(1_592)}\n`)
    for (let i = 0; i < 10; i++) p.push("stdout", line())
    for (let t = 0, next = 61_000; t < 8 * 3_600_000; t += 1_000) {
      scheduler.advance(1_000)
      await settle()
      if (scheduler.now() >= next) {
        p.push("stdout", line())
        next += 61_000
      }
    }
    const silenceWakes = api.sent.filter((s) => !s.noReply && s.text.includes("\nwake: no output for "))
    const bytes = api.sent.reduce((sum, s) => sum + Buffer.byteLength(s.text), 0)
    expect(silenceWakes.length).toBeGreaterThanOrEqual(1)
    expect(silenceWakes.length).toBeLessThanOrEqual(3)
    expect(bytes).toBeLessThanOrEqual(config.observation_session_bytes + 4 * 1_024)
    p.close()
    router.dispose()
  })
})
