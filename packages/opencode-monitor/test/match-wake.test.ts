import { describe, expect, test } from "bun:test"
import { ContextLedger } from "../src/delivery/context-ledger"
import type { InjectorOptions } from "../src/delivery/injector"
import { MatchWakePolicy } from "../src/delivery/match-wake"
import type { Route } from "../src/delivery/session-source"
import type { OutputBatch } from "../src/pipeline/batcher"
import { compileLineFilter } from "../src/pipeline/filter"
import { lineText } from "../src/pipeline/line"
import { createMonitorPipeline } from "../src/pipeline/pipeline"
import { FakeScheduler } from "./support/fake-scheduler"
import { settle } from "./support/fake-session-api"
import { setupInjector, testBatch } from "./support/injector-setup"
import { sizedLine } from "./support/lines"

const S = "ses_parent"
const enc = new TextEncoder()

/** One match wake is at most one batch: batch_max_lines and batch_max_bytes at their defaults. */
const WAKE_BOUNDS = { maxLines: 50, maxBytes: 16_384 }
const batch = testBatch
const match = (seq: number, opts: Parameters<typeof batch>[1] = {}) => batch(seq, { wakeAt: [0], ...opts })

function setup(options: Partial<InjectorOptions> = {}, ledger?: ContextLedger) {
  const base = setupInjector(
    {
      max_active_defer_ms: 60_000,
      wake_min_interval_ms: 10_000,
      max_match_wakes_per_minute: 6,
      batch_max_lines: WAKE_BOUNDS.maxLines,
      batch_max_bytes: WAKE_BOUNDS.maxBytes,
      ...options,
    },
    ledger,
  )
  const { api, injector } = base
  // As routeBatch routes a primary session's batches: a wake route for a match or the exit.
  const send = (b: OutputBatch, wakeLimit = 1, route?: Route) =>
    injector.enqueue(
      b,
      route ?? { sessionID: S, wake: !b.stillRunning || b.lines.some((l) => l.wake) },
      "dev",
      wakeLimit,
    )
  const wakes = () => api.sent.filter((p) => !p.noReply)
  const header = (text: string | undefined) => text?.split("\n").find((row) => row.startsWith("wake:"))
  return { ...base, send, wakes, header }
}

describe("match wake: one wake through the exit wake's gates", () => {
  test("a batch carrying a wake_pattern match is a reply-wanting prompt that says why, Status running", async () => {
    const { api, send, header } = setup()
    send(batch(1, { lines: 3, wakeAt: [1] }))
    await settle()
    expect(api.sent).toHaveLength(1)
    expect(api.sent[0]?.noReply).toBe(false)
    const text = api.sent[0]?.text ?? ""
    expect(header(text)).toBe("wake: line matched wake_pattern (1 of 1) at seq=101")
    expect(text).toContain("stream_policy: untrusted_observation\nwake: line matched")
    expect(text).toContain("[stdout seq=101] FAIL 1.1")
    expect(text).toContain("\nStatus: running\n")
    const log = api.logs.find((l) => l.message === "sent monitor output")
    expect(log?.extra).toMatchObject({ shouldReply: true, forceActiveDispatch: false, matchWake: "1/1" })
  })

  test("never sent into a busy session; it wakes once the session is idle", async () => {
    const { api, injector, send, advance } = setup({ max_active_defer_ms: 0 })
    api.busy[S] = "busy"
    send(match(1))
    await advance(120_000)
    expect(api.sent).toHaveLength(0)
    delete api.busy[S]
    injector.onSessionIdle(S)
    await settle()
    expect(api.sent.map((p) => p.noReply)).toEqual([false])
  })

  test("like the exit wake, past max_active_defer_ms it is forced into the busy session", async () => {
    const { api, send, advance } = setup({ max_active_defer_ms: 30_000 })
    api.busy[S] = "busy"
    send(match(1))
    await advance(29_000)
    expect(api.sent).toHaveLength(0)
    await advance(1_500)
    expect(api.sent.map((p) => p.noReply)).toEqual([false])
    const forced = api.logs.find((l) => l.message === "forced monitor output into a busy session")
    expect(forced?.extra).toMatchObject({ shouldReply: true, forceActiveDispatch: true, matchWake: "1/1" })
  })

  test("a match wake told to wait for wake_min_interval_ms counts the ceiling from the end of that wait", async () => {
    const { api, send, advance, wakes } = setup({ max_active_defer_ms: 30_000 })
    send(match(1), 2)
    await advance(1_000)
    send(match(2), 2) // the session is idle: told to wait until 10 s after the first wake
    await advance(1_000)
    api.busy[S] = "busy" // then a turn starts and keeps running
    await advance(35_000)
    expect(wakes()).toHaveLength(1)
    await advance(5_000)
    expect(wakes()).toHaveLength(2)
    expect((wakes()[1]?.at ?? 0) - (wakes()[0]?.at ?? 0)).toBe(40_000)
  })

  test("past wake_limit a match is never forced: observations wait for idle", async () => {
    const { api, send, advance } = setup({ max_active_defer_ms: 1_000 })
    send(match(1))
    await settle()
    api.busy[S] = "busy"
    send(match(2))
    await advance(120_000)
    expect(api.sent.map((p) => p.noReply)).toEqual([false])
  })

  test("a person's message within user_message_window_ms holds the match wake back", async () => {
    const { api, send, advance, wakes } = setup()
    api.addMessage(S, { role: "user", text: "hello", agent: "plan" })
    send(match(1))
    await advance(1_500)
    expect(api.sent).toHaveLength(0)
    await advance(1_000)
    expect(wakes()).toHaveLength(1)
    expect(wakes()[0]?.agent).toBe("plan")
  })

  test("matches that arrive while the session is busy coalesce into one wake carrying every line, in order", async () => {
    const { api, injector, send, wakes, header } = setup()
    api.busy[S] = "busy"
    send(match(1))
    send(batch(2))
    send(match(3, { lines: 2, wakeAt: [1] }))
    await settle()
    expect(injector.pending(S).map((d) => d.key)).toEqual(["monitor-output:mon_1:batch-3"])
    delete api.busy[S]
    injector.onSessionIdle(S)
    await settle()
    expect(api.sent).toHaveLength(1)
    const text = wakes()[0]?.text ?? ""
    expect(header(text)).toBe("wake: lines matched wake_pattern (1 of 1) at seq=100, 301")
    const seqs = [...text.matchAll(/\[stdout seq=(\d+)\]/g)].map((m) => Number(m[1]))
    expect(seqs).toEqual([100, 200, 300, 301])
  })
})

describe("match wake: interval, limit and session cap", () => {
  test("a second match within wake_min_interval_ms waits, then wakes once with every match since", async () => {
    const { api, send, advance, wakes, header } = setup()
    send(match(1), 3)
    await settle()
    expect(wakes()).toHaveLength(1)
    await advance(1_000)
    send(match(2), 3)
    await advance(2_000)
    send(batch(3), 3)
    send(match(4), 3)
    await advance(5_000) // 8 s after the first wake
    expect(wakes()).toHaveLength(1)
    expect(api.sent).toHaveLength(1) // the plain batch 3 waits with them, keeping line order
    expect(api.logs.find((l) => l.message === "match wake waits")?.extra).toMatchObject({
      reason: "wake_min_interval_ms",
    })
    await advance(2_100)
    expect(wakes()).toHaveLength(2)
    expect(wakes()[1]?.at).toBe((wakes()[0]?.at ?? 0) + 10_000)
    expect(header(wakes()[1]?.text)).toBe("wake: lines matched wake_pattern (2 of 3) at seq=200, 400")
    expect(wakes()[1]?.text).toContain("[stdout seq=300] line 3.0")
  })

  test("past wake_limit a match is a plain observation, and the exit still wakes", async () => {
    const { api, send, advance, wakes, header } = setup()
    send(match(1))
    await advance(20_000)
    send(match(2))
    await advance(20_000)
    send(batch(3, { terminal: { kind: "exited", code: 0 } }))
    await advance(1_000)
    expect(api.sent.map((p) => [p.noReply, header(p.text)])).toEqual([
      [false, "wake: line matched wake_pattern (1 of 1) at seq=100"],
      [true, undefined],
      [false, undefined],
    ])
    expect(wakes()[1]?.text).toContain("Status: exited (code=0)")
  })

  test("wake_limit 3 with a match every 400 ms for 20 s: three wakes, spaced by the interval, every line delivered once", async () => {
    const { api, send, advance, wakes } = setup({
      wake_min_interval_ms: 5_000,
    })
    for (let seq = 1; seq <= 50; seq++) {
      send(match(seq), 3)
      await advance(400)
    }
    send(batch(51, { terminal: { kind: "exited", code: 1 }, lines: 0 }), 3)
    await advance(2_000)
    const times = wakes().map((p) => p.at)
    expect(times).toHaveLength(4) // three match wakes and the exit
    expect(times[1] as number).toBeGreaterThanOrEqual((times[0] as number) + 5_000)
    expect(times[2] as number).toBeGreaterThanOrEqual((times[1] as number) + 5_000)
    const delivered = api.sent.flatMap((p) => [...p.text.matchAll(/\[stdout seq=(\d+)\]/g)].map((m) => Number(m[1])))
    expect(delivered).toEqual(Array.from({ length: 50 }, (_, i) => (i + 1) * 100))
  })

  test("the per-session cap holds a third monitor's wake until the minute is over", async () => {
    const { api, send, advance, wakes } = setup({
      wake_min_interval_ms: 1_000,
      max_match_wakes_per_minute: 2,
    })
    send(match(1, { monitorId: "mon_a" }))
    await advance(1_000)
    send(match(1, { monitorId: "mon_b" }))
    await advance(1_000)
    send(match(1, { monitorId: "mon_c" }))
    await advance(30_000)
    expect(wakes().map((p) => p.text.match(/monitor_id: (\S+)/)?.[1])).toEqual(["mon_a", "mon_b"])
    expect(api.logs.find((l) => l.message === "match wake waits")?.extra).toMatchObject({
      monitorId: "mon_c",
      reason: "max_match_wakes_per_minute",
    })
    await advance(30_000)
    expect(wakes().map((p) => p.text.match(/monitor_id: (\S+)/)?.[1])).toEqual(["mon_a", "mon_b", "mon_c"])
    expect((wakes()[2]?.at ?? 0) - (wakes()[0]?.at ?? 0)).toBeGreaterThanOrEqual(60_000)
  })

  test("a match wake waiting for its interval does not hold back another monitor's output", async () => {
    const { api, send, advance } = setup()
    send(match(1), 2)
    await advance(1_000)
    send(match(2), 2)
    await advance(1_000)
    send(batch(1, { monitorId: "mon_other" }))
    await advance(1_000)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1", "monitor-output:mon_other:batch-1"])
  })

  test("the exit absorbs a match wake still waiting: one wake, with the matching line and the exit status", async () => {
    const { api, send, advance, wakes } = setup()
    send(match(1), 2)
    await advance(1_000)
    send(match(2), 2)
    send(batch(3, { terminal: { kind: "exited", code: 0 }, lines: 0 }), 2)
    await advance(1_000)
    expect(api.sources()).toEqual(["monitor-output:mon_1:batch-1", "monitor-output:mon_1:batch-3"])
    expect(wakes()[1]?.text).toContain("[stdout seq=200] FAIL 2.0")
    expect(wakes()[1]?.text).toContain("Status: exited (code=0)")
  })

  test("a flood of matches while busy stays bounded, keeps the first match, and counts the rest in dropped:", async () => {
    const { api, injector, send, wakes } = setup()
    api.busy[S] = "busy"
    for (let seq = 1; seq <= 1_000; seq++) send(batch(seq, { lines: 50, wakeAt: [0] }))
    await settle()
    expect(injector.pending(S)).toHaveLength(1)
    expect(injector.pending(S)[0]?.batch.lines.length).toBeLessThanOrEqual(WAKE_BOUNDS.maxLines)
    delete api.busy[S]
    injector.onSessionIdle(S)
    await settle()
    const text = wakes()[0]?.text ?? ""
    expect(text).toContain("[stdout seq=100] FAIL 1.0")
    const shown = [...text.matchAll(/\[stdout seq=\d+\]/g)].length
    expect(text).toContain(`dropped: ${50_000 - shown} matched, 0 unmatched (`)
  })

  test("a match wake assembled while busy stays within batch_max_bytes, counted as the envelope's rows", async () => {
    // Lines of 17 visual rows each (\v breaks), 147 bytes but ~420 as rows: 100 of them were 1 600
    // rows, 41 KB before the fix.
    const { api, injector, send, wakes } = setup()
    api.busy[S] = "busy"
    const rowsLine = (seq: number, wake: boolean) => {
      return sizedLine(seq, "stdout", `ERR${"\vxxxxxxxx".repeat(16)}`, { wake })
    }
    for (let seq = 1; seq <= 40; seq++) {
      const lines = Array.from({ length: 50 }, (_, i) => rowsLine(seq * 100 + i, true))
      send({ ...batch(seq), lines })
    }
    await settle()
    delete api.busy[S]
    injector.onSessionIdle(S)
    await settle()
    const text = wakes()[0]?.text ?? ""
    const rows = text.split("\n").filter((row) => row.startsWith("[stdout seq="))
    expect(rows.reduce((n, row) => n + Buffer.byteLength(row) + 1, 0)).toBeLessThanOrEqual(WAKE_BOUNDS.maxBytes)
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(WAKE_BOUNDS.maxBytes + 1_024)
    expect(text).toContain("[stdout seq=100] ERR")
  })

  test("the ceiling counts from the wake's own queue time, not from the observations it absorbed", async () => {
    const { api, send, advance, wakes, scheduler } = setup({ max_active_defer_ms: 5_000 })
    api.busy[S] = "busy"
    for (let seq = 1; seq <= 12; seq++) {
      send(batch(seq))
      await advance(500)
    }
    send(match(13))
    const queuedAt = scheduler.now()
    await advance(4_900)
    expect(wakes()).toHaveLength(0) // before the fix: forced at once, it inherited 6 s of waiting
    await advance(200)
    expect(wakes()).toHaveLength(1)
    expect((wakes()[0]?.at ?? 0) - queuedAt).toBeGreaterThanOrEqual(5_000)
    expect(wakes()[0]?.text).toContain("[stdout seq=100] line 1.0")
  })

  test("a match wake is charged to the session's context with the bytes it sent; observations are the budget's", async () => {
    const ledger = new ContextLedger()
    const { api, send, advance } = setup({}, ledger)
    send(batch(1))
    await advance(1_000)
    expect(ledger.spent(S)).toBe(0)
    send(match(2, { lines: 3, wakeAt: [1] }))
    await advance(1_000)
    const wake = api.sent.find((p) => !p.noReply)
    expect(wake?.text).toContain("wake: line matched wake_pattern (1 of 1)")
    expect(ledger.spent(S)).toBe(Buffer.byteLength(wake?.text ?? "x"))
    send(batch(3, { terminal: { kind: "exited", code: 0 } }))
    await advance(1_000)
    expect(ledger.spent(S)).toBe(Buffer.byteLength(wake?.text ?? "x"))
  })
})

describe("MatchWakePolicy: state is per monitor and per session, and goes with them", () => {
  test("a monitor's count goes when it ends or its session is deleted", () => {
    const scheduler = new FakeScheduler()
    const policy = new MatchWakePolicy({ wake_min_interval_ms: 1_000, max_match_wakes_per_minute: 6 }, scheduler)
    expect(policy.decide(S, match(1, { monitorId: "mon_a" }), 1).kind).toBe("wake")
    expect(policy.decide(S, match(1, { monitorId: "mon_b" }), 1).kind).toBe("wake")
    expect([policy.exhausted("mon_a", 1), policy.exhausted("mon_b", 1)]).toEqual([true, true])
    policy.forgetMonitor("mon_a")
    expect([policy.exhausted("mon_a", 1), policy.exhausted("mon_b", 1)]).toEqual([false, true])
    policy.forgetSession(S)
    expect(policy.exhausted("mon_b", 1)).toBe(false)
  })
})

describe("match wake: session sources", () => {
  test("a subagent's match wake routed to the root wakes it; past the limit the root gets nothing", async () => {
    const { api, send, advance } = setup()
    const child: Route = { sessionID: "ses_child", wake: false }
    const root: Route = { sessionID: S, wake: true, subagentSessionID: "ses_child" }
    for (const seq of [1, 2]) {
      const b = match(seq)
      send(b, 1, child)
      send(b, 1, root)
      await advance(20_000)
    }
    expect(api.sent.map((p) => [p.sessionID, p.noReply])).toEqual([
      ["ses_child", true],
      [S, false],
      ["ses_child", true],
    ])
    expect(api.sent[1]?.text).toContain("subagent_session: ses_child\n")
    expect(api.sent[1]?.text).toContain("wake: line matched wake_pattern (1 of 1)")
  })
})

describe("pipeline: wake_pattern", () => {
  async function pipeline(
    matchPattern: string | undefined,
    matchWakeLeft?: () => boolean,
    settleMs = 0,
    flushIntervalMs = 1_000,
  ) {
    const scheduler = new FakeScheduler()
    const batches: OutputBatch[] = []
    const p = createMonitorPipeline({
      monitorId: "mon_1",
      config: {
        batch_max_lines: 50,
        batch_max_bytes: 16_384,
        flush_interval_ms: flushIntervalMs,
        ring_max_lines: 3,
        line_max_bytes: 8_192,
        wake_settle_ms: settleMs,
      },
      filter: await compileLineFilter(matchPattern, 512),
      wakeFilter: await compileLineFilter("ready on|FAIL", 512, "wake_pattern"),
      ...(matchWakeLeft ? { matchWakeLeft } : {}),
      scheduler,
      onBatch: (b) => batches.push(b),
    })
    return { scheduler, batches, p }
  }

  test("a batch carrying a wake line is flushed on the next tick, not after flush_interval_ms", async () => {
    const { scheduler, batches, p } = await pipeline(undefined)
    p.push("stdout", enc.encode("compiling\nready on :3000\n"))
    expect(batches).toHaveLength(0)
    scheduler.advance(0)
    expect(batches.map((b) => b.lines.map((l) => [lineText(l), l.wake]))).toEqual([
      [
        ["compiling", false],
        ["ready on :3000", true],
      ],
    ])
  })

  test("a wake line is delivered even when match_pattern filters it out, and is not counted as dropped", async () => {
    const { scheduler, batches, p } = await pipeline("ERROR")
    p.push("stdout", enc.encode("noise\nready on :3000\nERROR x\n"))
    scheduler.advance(0)
    expect(batches[0]?.lines.map((l) => [lineText(l), l.matched, l.wake])).toEqual([
      ["ready on :3000", false, true],
      ["ERROR x", true, false],
    ])
    p.push("stdout", enc.encode("a\nb\nc\n")) // pushes all three out of the 3-line ring
    p.finish({ kind: "exited", code: 0 })
    expect(batches.at(-1)?.dropped).toEqual({ matched: 0, unmatched: 1, bytes: 5 })
  })

  test("past wake_limit a matching line is a plain line: not flushed early, filtered by match_pattern like any", async () => {
    let left = true
    const { scheduler, batches, p } = await pipeline("ERROR|ready", () => left)
    p.push("stdout", enc.encode("ready on :3000\n"))
    scheduler.advance(0)
    expect(batches.map((b) => b.lines.map((l) => l.wake))).toEqual([[true]])
    left = false // the injector recorded the last match wake this monitor may cause
    p.push("stdout", enc.encode("ready on :3001\nready on :3002\n"))
    scheduler.advance(0)
    expect(batches).toHaveLength(1) // no batch of its own on the next tick
    scheduler.advance(1_000)
    expect(batches.map((b) => b.lines.map((l) => [lineText(l), l.wake]))).toEqual([
      [["ready on :3000", true]],
      [
        ["ready on :3001", false],
        ["ready on :3002", false],
      ],
    ])
    // Without match_pattern's consent it is not delivered either.
    const filtered = await pipeline("ERROR", () => false)
    filtered.p.push("stdout", enc.encode("ready on :3000\n"))
    filtered.scheduler.advance(1_000)
    expect(filtered.batches).toHaveLength(0)
  })

  test("with wake_settle_ms 0, a batch carrying a wake line is flushed on the next tick", async () => {
    const { scheduler, batches, p } = await pipeline(undefined, undefined, 0)
    p.push("stdout", enc.encode("FAIL sum.test.js\n"))
    scheduler.advance(0)
    expect(batches.map((b) => b.lines.length)).toEqual([1])
  })

  test("settle: the wake waits for the output to pause, and carries the lines that came meanwhile, in order", async () => {
    const { scheduler, batches, p } = await pipeline(undefined, undefined, 200)
    p.push("stdout", enc.encode("FAIL sum.test.js > adds\n"))
    for (const detail of [
      "AssertionError: expected 3 to be 4",
      "- Expected  4",
      "+ Received  3",
      " ❯ sum.test.js:5:22",
    ]) {
      scheduler.advance(150)
      expect(batches).toHaveLength(0)
      p.push("stdout", enc.encode(`${detail}\n`))
    }
    scheduler.advance(199)
    expect(batches).toHaveLength(0)
    scheduler.advance(1)
    expect(batches.map((b) => b.lines.map((l) => [l.seq, lineText(l)]))).toEqual([
      [
        [1, "FAIL sum.test.js > adds"],
        [2, "AssertionError: expected 3 to be 4"],
        [3, "- Expected  4"],
        [4, "+ Received  3"],
        [5, " ❯ sum.test.js:5:22"],
      ],
    ])
  })

  test("settle: output that never pauses sends the wake at the ceiling, 3 s after the match", async () => {
    const { scheduler, batches, p } = await pipeline(undefined, undefined, 200)
    p.push("stdout", enc.encode("FAIL a\n"))
    for (let t = 0; t < 40; t++) {
      scheduler.advance(100)
      p.push("stdout", enc.encode(`detail ${t}\n`))
    }
    // The ceiling (3 000 ms) flushed it, although a line came every 100 ms; flush_interval_ms (1 s) did not.
    expect(batches[0]?.lines.map((l) => lineText(l))).toEqual([
      "FAIL a",
      ...Array.from({ length: 29 }, (_, t) => `detail ${t}`),
    ])
  })

  test("settle: flush_interval_ms does not cut a settling wake short, counted from a line before the match", async () => {
    // vitest under load: the rerun header, the failure, then its details in pieces, each within the pause.
    const { scheduler, batches, p } = await pipeline(undefined, undefined, 500)
    p.push("stdout", enc.encode("RERUN sum.js\n"))
    scheduler.advance(50)
    p.push("stdout", enc.encode("FAIL sum.test.js > adds\n"))
    for (const detail of ["Failed Tests 1", "- Expected  4", "+ Received  3"]) {
      scheduler.advance(450)
      p.push("stdout", enc.encode(`${detail}\n`))
    }
    scheduler.advance(499)
    expect(batches).toHaveLength(0)
    scheduler.advance(1)
    expect(batches.map((b) => b.lines.map((l) => lineText(l)))).toEqual([
      ["RERUN sum.js", "FAIL sum.test.js > adds", "Failed Tests 1", "- Expected  4", "+ Received  3"],
    ])
  })

  test("settle: output that waited in the pipe while the event loop was busy still joins the wake", async () => {
    const { scheduler, batches, p } = await pipeline(undefined, undefined, 200)
    // The event loop runs due timers before it reads the pipes: a zero-delay timer runs after that read.
    let waiting: string[] = []
    const setTimeout = scheduler.setTimeout.bind(scheduler)
    scheduler.setTimeout = (callback, ms) => {
      if (ms === 0) for (const line of waiting.splice(0)) p.push("stdout", enc.encode(`${line}\n`))
      return setTimeout(callback, ms)
    }
    p.push("stdout", enc.encode("FAIL sum.test.js > adds\n"))
    scheduler.advance(100)
    p.push("stdout", enc.encode("ok resolves value 1\n"))
    // Busy for 300 ms: the summary was printed meanwhile and waits in the pipe as the settle timer fires.
    waiting = ["- Expected  4", "+ Received  3"]
    scheduler.advance(300)
    expect(batches).toHaveLength(0)
    scheduler.advance(200)
    expect(batches.map((b) => b.lines.map((l) => lineText(l)))).toEqual([
      ["FAIL sum.test.js > adds", "ok resolves value 1", "- Expected  4", "+ Received  3"],
    ])
  })

  test("settle: a batch that fills up goes at once, and the exit is never delayed", async () => {
    const full = await pipeline(undefined, undefined, 200)
    full.p.push("stdout", enc.encode(`FAIL a\n${Array.from({ length: 49 }, (_, i) => `x${i}`).join("\n")}\n`))
    expect(full.batches.map((b) => b.lines.length)).toEqual([50])
    const ending = await pipeline(undefined, undefined, 200)
    ending.p.push("stdout", enc.encode("FAIL a\nstack\n"))
    ending.p.finish({ kind: "exited", code: 1 })
    expect(ending.batches.map((b) => [b.lines.length, b.stillRunning])).toEqual([[2, false]])
    expect(ending.scheduler.pendingTimers).toBe(0)
  })

  test("an invalid wake_pattern is refused naming wake_pattern", async () => {
    await expect(compileLineFilter("(", 512, "wake_pattern")).rejects.toThrow(/^wake_pattern "\(" is not a valid RE2/)
    await expect(compileLineFilter("x".repeat(10), 5, "wake_pattern")).rejects.toThrow(
      /^wake_pattern is 10 characters long/,
    )
  })
})
