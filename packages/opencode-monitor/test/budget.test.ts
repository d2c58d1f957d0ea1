import { describe, expect, test } from "bun:test"
import { type BudgetOptions, isRealUserTurn, ObservationBudget } from "../src/delivery/budget"
import { formatMonitorBatch } from "../src/delivery/envelope"
import type { Route } from "../src/delivery/session-source"
import { NO_DROPS, type OutputBatch } from "../src/pipeline/batcher"
import { lineText, type MonitorLine } from "../src/pipeline/line"
import { FakeScheduler } from "./support/fake-scheduler"
import { batchOf, sizedLine } from "./support/lines"

const OPTIONS: BudgetOptions = {
  observation_bytes_per_minute: 4_096,
  observation_burst_bytes: 16_384,
  observation_session_bytes: 65_536,
  observation_summary_interval_ms: 300_000,
}

type Sent = { batch: OutputBatch; route: Route; bytes: number; at: number; wakeLimit: number }

/** A budget wired to a fake clock, and a monitor that prints batches of lines into it. */
function setup(options: Partial<BudgetOptions> = {}) {
  const scheduler = new FakeScheduler()
  const sent: Sent[] = []
  /** Match wakes each monitor has left (what the injector's MatchWakePolicy would say). */
  const wakesLeft = new Map<string, number>()
  const budget = new ObservationBudget(
    { ...OPTIONS, ...options },
    {
      scheduler,
      forward: (batch, route, label, wakeLimit) =>
        sent.push({
          batch,
          route,
          bytes: Buffer.byteLength(formatMonitorBatch({ batch, label })),
          at: scheduler.now(),
          wakeLimit,
        }),
    },
  )
  const monitors = new Map<string, { seq: number; batchSeq: number }>()
  const print = (
    texts: string[],
    opts: {
      monitorId?: string
      sessionID?: string
      pattern?: boolean
      status?: OutputBatch["status"]
      /** Every line matched `wake_pattern`; the batch is routed as a match wake with this wake_limit. */
      wakeLimit?: number
      route?: Partial<Route>
    } = {},
  ) => {
    const monitorId = opts.monitorId ?? "mon_a"
    const m = monitors.get(monitorId) ?? { seq: 0, batchSeq: 0 }
    monitors.set(monitorId, m)
    const lines = texts.map((text) => sizedLine(++m.seq, "stdout", text, { wake: opts.wakeLimit !== undefined }))
    const terminal = opts.status !== undefined
    const batch = batchOf({
      monitorId,
      batchSeq: ++m.batchSeq,
      lines,
      stillRunning: !terminal,
      status: opts.status ?? { kind: "running" },
      dropped: NO_DROPS,
    })
    const route = {
      sessionID: opts.sessionID ?? "ses_1",
      wake: terminal || opts.wakeLimit !== undefined,
      ...opts.route,
    }
    budget.admit(batch, route, {
      label: "dev-server",
      hasPattern: opts.pattern ?? false,
      wakeLimit: opts.wakeLimit ?? 0,
      matchWakeLeft: (wakesLeft.get(monitorId) ?? 0) > 0,
    })
    return batch
  }
  /** `seconds` of a monitor printing 10 ordinary 60-byte request lines a second. */
  const chatter = (seconds: number, opts: { monitorId?: string; sessionID?: string } = {}) => {
    for (let s = 0; s < seconds; s++) {
      const base = (monitors.get(opts.monitorId ?? "mon_a")?.seq ?? 0) + 1
      print(
        Array.from(
          { length: 10 },
          (_, i) => `GET /api/items/${String(base + i).padStart(6, "0")} 200 OK in 3ms ...........`,
        ),
        opts,
      )
      scheduler.advance(1_000)
    }
  }
  const bytesTo = (sessionID = "ses_1") =>
    sent.filter((s) => s.route.sessionID === sessionID).reduce((n, s) => n + s.bytes, 0)
  const texts = () => sent.flatMap((s) => s.batch.lines.map((l) => lineText(l)))
  return { scheduler, sent, budget, print, chatter, bytesTo, texts, wakesLeft }
}

describe("ObservationBudget", () => {
  test("a quiet monitor's output passes whole while it fits the burst", () => {
    const { sent, print } = setup()
    print(["server listening on :3000", "ready"])
    expect(sent).toHaveLength(1)
    expect(sent[0]?.batch.lines.map((l) => lineText(l))).toEqual(["server listening on :3000", "ready"])
    expect(sent[0]?.batch.budget).toBeUndefined()
  })

  test("token bucket: a chatty monitor gets its burst, then no more than the per-minute rate", () => {
    const { chatter, bytesTo, sent } = setup({ observation_session_bytes: 10_000_000 })
    chatter(600)
    // 10 minutes: the burst plus ten minutes of refill, never more.
    expect(bytesTo()).toBeLessThanOrEqual(16_384 + 10 * 4_096)
    // Without the budget this is 600 envelopes and ~570 KB.
    expect(bytesTo()).toBeGreaterThan(16_384 + 8 * 4_096)
    expect(sent.length).toBeLessThan(80)
  })

  test("what the budget held back is counted in dropped: and the envelope says how to read it", () => {
    const { chatter, sent } = setup({ observation_session_bytes: 10_000_000 })
    chatter(120)
    const afterGap = sent.find((s) => s.batch.budget !== undefined)
    expect(afterGap).toBeDefined()
    const note = afterGap?.batch.budget
    expect(note?.kind).toBe("held")
    expect(afterGap?.batch.dropped.matched).toBe(note?.lines ?? -1)
    const text = formatMonitorBatch({ batch: afterGap?.batch as OutputBatch, label: "dev-server" })
    expect(text).toContain(`budget: ${note?.lines} lines (${note?.bytes} bytes) since the last envelope were held back`)
    expect(text).toContain(`monitor_output {"monitor_id":"mon_a","since_sequence":${note?.sinceSequence}}`)
    // Every line is either shown or counted as held, none twice.
    const shown = sent.reduce((n, s) => n + s.batch.lines.length, 0)
    const held = sent.reduce((n, s) => n + s.batch.dropped.matched, 0)
    const last = sent[sent.length - 1]?.batch.lines.at(-1)?.seq ?? 0
    expect(shown + held).toBe(last)
    // since_sequence is where the held lines start: right after the last line of the envelope before.
    const notes = sent.flatMap((s, i) => (s.batch.budget && i > 0 ? [[s.batch.budget.sinceSequence, i]] : []))
    expect(notes.length).toBeGreaterThan(3)
    for (const [since, i] of notes) expect(since).toBe(sent[(i as number) - 1]?.batch.lines.at(-1)?.seq ?? -1)
  })

  test("session total: all monitors of a session together stay within it between user turns", () => {
    const { chatter, bytesTo, sent, scheduler } = setup({ observation_summary_interval_ms: 3_600_000 })
    for (let s = 0; s < 1_800; s++) {
      chatter(1, { monitorId: `mon_${"abc"[s % 3]}` })
    }
    expect(scheduler.now()).toBe(1_800_000)
    expect(bytesTo()).toBeLessThanOrEqual(65_536)
    expect(bytesTo()).toBeGreaterThan(60_000)
    expect(sent.every((s) => s.batch.budget?.kind !== "summary")).toBe(true)
  })

  test("a person's message resets the session's total and its monitors' buckets", () => {
    const { chatter, bytesTo, budget, sent } = setup({ observation_summary_interval_ms: 3_600_000 })
    chatter(1_200)
    const before = bytesTo()
    expect(before).toBeLessThanOrEqual(65_536)
    const count = sent.length
    chatter(60)
    expect(sent.length).toBe(count)
    budget.onUserTurn("ses_1")
    expect(budget.spent("ses_1")).toBe(0)
    chatter(1)
    expect(sent.length).toBe(count + 1)
  })

  test("only a person's message counts as a user turn, never an injected synthetic one", () => {
    expect(isRealUserTurn([{ type: "text", synthetic: true }])).toBe(false)
    expect(isRealUserTurn([{ type: "text" }, { type: "file" }])).toBe(true)
    expect(isRealUserTurn([{ type: "text", synthetic: false }])).toBe(true)
    expect(isRealUserTurn([{ type: "file" }])).toBe(false)
  })

  test("when tight, an error-looking line gets through first, with the latest line", () => {
    const { chatter, print, texts, sent } = setup({ observation_session_bytes: 10_000_000 })
    chatter(30)
    const count = sent.length
    print(["GET /a 200", "Error: connect ECONNREFUSED 127.0.0.1:5432", "GET /b 200", "GET /c 200"])
    chatter(10)
    expect(texts()).toContain("Error: connect ECONNREFUSED 127.0.0.1:5432")
    const carrying = sent.slice(count).find((s) => s.batch.lines.some((l) => lineText(l).startsWith("Error:")))
    expect(carrying?.batch.lines.length).toBeLessThan(10)
    expect(carrying?.batch.budget?.kind).toBe("held")
  })

  test("an error-looking line printed just before a silence arrives once the bucket has room, not at the summary", () => {
    const { chatter, print, sent, scheduler } = setup({ observation_session_bytes: 10_000_000 })
    chatter(30)
    print(["GET /a 200", "FATAL: panic: runtime error: index out of range", "GET /b 200"])
    const printedAt = scheduler.now()
    scheduler.advance(60_000)
    const carrying = sent.find((s) => s.batch.lines.some((l) => lineText(l).startsWith("FATAL")))
    expect(carrying).toBeDefined()
    expect(lineText(carrying?.batch.lines[0] as MonitorLine)).toBe("FATAL: panic: runtime error: index out of range")
    // Sent once the bucket had room for it (~8 s of refill), long before a summary would be due.
    expect((carrying?.at ?? Number.POSITIVE_INFINITY) - printedAt).toBeLessThan(15_000)
    expect(carrying?.batch.budget?.kind).toBe("held")
    expect(scheduler.pendingTimers).toBe(0)
    expect(printedAt).toBe(30_000)
  })

  test("a flood held batch after batch: the error line sent after it is the oldest of the last 20 held, once it fits", () => {
    // 12 000 lines in one instant (past the bucket after the first batches, and past the 8 192 held
    // lines that wait to be looked at), an error line every 37th; then silence.
    const { print, sent, scheduler } = setup({ observation_session_bytes: 10_000_000 })
    const errors: string[] = []
    for (let b = 0; b < 240; b++) {
      const lines = Array.from({ length: 50 }, (_, i) => {
        const n = b * 50 + i + 1
        if (n % 37 !== 0) return `GET /api/items/${String(n).padStart(6, "0")} 200 OK in 3ms`
        errors.push(`ERROR job ${n} failed`)
        return errors[errors.length - 1] as string
      })
      print(lines)
    }
    const duringFlood = sent.length
    scheduler.advance(60_000)
    const after = sent.slice(duringFlood).filter((s) => s.batch.lines.some((l) => lineText(l).startsWith("ERROR")))
    const lastTwenty = errors.slice(-20)
    expect(lineText(after[0]?.batch.lines[0] as MonitorLine)).toBe(lastTwenty[0] as string)
    // One envelope's worth of refill (~8 s at 4 KB/min), not the summary 5 minutes on.
    expect(after[0]?.at ?? Number.POSITIVE_INFINITY).toBeLessThan(10_000)
    // Then the rest of them, oldest first, as the bucket refills; nothing older.
    const shown = after.flatMap((s) => s.batch.lines.map((l) => lineText(l)))
    expect(shown).toEqual(lastTwenty.slice(0, shown.length))
  })

  test("a flood held batch after batch is looked at once per refill, not line by line as it is held", () => {
    // Each decode of a line's text is counted: the look for error words is what decodes held lines.
    let looks = 0
    const counted = (seq: number, text: string) => {
      const block = Buffer.from(text)
      block.toString = function (this: Buffer, ...args: Parameters<Buffer["toString"]>) {
        looks++
        return Buffer.prototype.toString.apply(this, args)
      }
      const line = sizedLine(seq, "stdout", text)
      line.block = block
      return line
    }
    const { budget, scheduler, sent } = setup({ observation_session_bytes: 10_000_000 })
    let seq = 0
    const total = 240 * 50
    for (let b = 1; b <= 240; b++) {
      const lines = Array.from({ length: 50 }, () => {
        const n = ++seq
        return counted(n, n % 37 === 0 ? `ERROR job ${n} failed` : `GET /api/items/${n} 200 OK`)
      })
      budget.admit(
        batchOf({
          monitorId: "mon_a",
          batchSeq: b,
          lines,
          stillRunning: true,
          status: { kind: "running" },
          dropped: NO_DROPS,
        }),
        { sessionID: "ses_1", wake: false },
        { label: "dev-server", hasPattern: false, wakeLimit: 0, matchWakeLeft: false },
      )
    }
    scheduler.advance(60_000)
    expect(sent.some((s) => s.batch.lines.some((l) => lineText(l).startsWith("ERROR")))).toBe(true)
    // What was sent, and the newest held lines up to the 20 kept error lines (20 × 37), a few times:
    // far from one look at each of the 12 000 lines.
    expect(looks).toBeLessThan(total / 3)
  })

  test("each word of the fixed list makes a line error-looking, in any case", () => {
    for (const word of ["ERROR", "Failed", "panic:", "NullPointerException", "Traceback (most recent call last):"]) {
      const { chatter, print, texts } = setup({ observation_session_bytes: 10_000_000 })
      chatter(30)
      print(["GET /a 200", `x ${word} y`, "GET /b 200"])
      chatter(20)
      expect(texts()).toContain(`x ${word} y`)
    }
  })

  test("the first lines after start go first when their batch does not fit", () => {
    const { print, texts, scheduler } = setup({ observation_burst_bytes: 1_024 })
    const stack = Array.from(
      { length: 13 },
      (_, i) => `    at Module._load (node:internal/modules/cjs/loader:${1000 + i}:12)`,
    )
    print(["booting", "Cannot find module 'express'", ...stack])
    scheduler.advance(10_000)
    expect(texts().slice(0, 2)).toEqual(["booting", "Cannot find module 'express'"])
  })

  test("with match_pattern set, matching lines get through as they fit, not only when a whole batch does", () => {
    // Batches of 50 lines (~3.5 KB) never fit a 1 KB burst whole; matching lines still go, a few at a time.
    const run = (pattern: boolean) => {
      const { print, sent, scheduler } = setup({
        observation_burst_bytes: 1_024,
        observation_session_bytes: 10_000_000,
      })
      for (let s = 0; s < 60; s++) {
        print(
          Array.from({ length: 50 }, (_, i) => `build step ${s * 50 + i + 100} done .......................`),
          { pattern },
        )
        scheduler.advance(1_000)
      }
      return sent.filter((x) => x.batch.budget?.kind !== "summary").flatMap((x) => x.batch.lines)
    }
    expect(run(false).filter((l) => l.seq > 20)).toHaveLength(0)
    expect(run(true).filter((l) => l.seq > 20).length).toBeGreaterThan(5)
  })

  // Past its bucket a batch sends its most informative lines that fit: first the startup lines, then
  // error-looking ones, then matching ones, then the latest line. A 1 KB bucket has room for the
  // envelope (estimated at 480 bytes) and one 300-byte line (+24 for its prefix), not two.
  const pastStartup = (startupLines: number, pattern = false) => {
    const s = setup({ observation_burst_bytes: 1_024, observation_session_bytes: 10_000_000 })
    s.print(
      Array.from({ length: startupLines }, (_, i) => `${i + 1}`),
      { pattern },
    )
    s.scheduler.advance(60_000)
    expect(s.sent.map((x) => [x.batch.lines.length, x.batch.budget])).toEqual([[startupLines, undefined]])
    return s
  }
  const long = (text: string) => text.padEnd(300, ".")

  test("past its bucket, an error-looking line goes before an earlier line matching match_pattern", () => {
    const { print, sent } = pastStartup(20, true)
    print([long("GET /health 200 matched"), long("worker crashed: Error: ENOMEM"), long("GET /health 200 latest")], {
      pattern: true,
    })
    expect(sent.at(-1)?.batch.lines.map((l) => [l.seq, lineText(l)])).toEqual([
      [22, long("worker crashed: Error: ENOMEM")],
    ])
    expect(sent.at(-1)?.batch.budget?.lines).toBe(2)
  })

  test("past its bucket, a startup line (one of the first 20) goes before a later error-looking line", () => {
    const { print, sent } = pastStartup(19)
    print([long("listening on :3000"), long("ERROR: db connection refused"), long("GET /health 200 latest")])
    expect(sent.at(-1)?.batch.lines.map((l) => [l.seq, lineText(l)])).toEqual([[20, long("listening on :3000")]])
  })

  test("past its bucket, the latest line of the batch goes with the priority line when there is room for both", () => {
    // Two 200-byte lines fit the 1 KB bucket (480 + 2 × 224), the whole batch of four does not.
    const { print, sent } = pastStartup(20)
    const [a, error, b, latest] = ["GET /a 200", "ERROR: job 7 failed", "GET /b 200", "GET /c 200 latest"].map((t) =>
      t.padEnd(200, "."),
    ) as [string, string, string, string]
    print([a, error, b, latest])
    expect(sent.at(-1)?.batch.lines.map((l) => lineText(l))).toEqual([error, latest])
    expect(sent.at(-1)?.batch.budget?.lines).toBe(2)
  })

  test("past the session's total: one short summary with the last line and counts, then nothing until a person writes", () => {
    const { chatter, sent, scheduler, budget } = setup({
      observation_session_bytes: 20_000,
      observation_summary_interval_ms: 300_000,
    })
    chatter(3_600)
    const summaries = sent.filter((s) => s.batch.budget?.kind === "summary")
    // Summaries that fit what the session has left, then the one that does not, then nothing.
    expect(summaries.length).toBeGreaterThanOrEqual(1)
    expect(summaries.length).toBeLessThanOrEqual(3)
    expect(sent.at(-1)).toBe(summaries.at(-1) as Sent)
    const before = sent.slice(0, -1).reduce((n, s) => n + s.bytes, 0)
    expect(before).toBeLessThanOrEqual(20_000)
    expect(before + (summaries.at(-1)?.bytes ?? 0)).toBeGreaterThan(20_000)
    expect(summaries.at(-1)?.at ?? Number.POSITIVE_INFINITY).toBeLessThan(1_800_000)
    const last = summaries.at(-1)?.batch as OutputBatch
    expect(last.lines.map((l) => lineText(l))).toHaveLength(1)
    expect(lineText(last.lines[0] as MonitorLine)).toMatch(/^GET \/api\/items\//)
    expect(last.budget?.lines).toBeGreaterThan(2_000)
    const text = formatMonitorBatch({ batch: last, label: "dev-server" })
    expect(text).toContain("summary: output keeps flowing past the observation budget")
    // Counted: the session's total holds every byte sent, the summary included.
    expect(budget.spent("ses_1")).toBe(sent.reduce((n, s) => n + s.bytes, 0))
    expect(scheduler.pendingTimers).toBe(0)
    // A person writes: the budget starts afresh, and once it is spent again summaries come again.
    const count = summaries.length
    budget.onUserTurn("ses_1")
    chatter(3_600)
    expect(sent.filter((s) => s.batch.budget?.kind === "summary").length).toBeGreaterThan(count)
    expect(sent.at(-1)?.batch.budget?.kind).toBe("summary")
    expect(scheduler.now()).toBe(7_200_000)
  })

  test("8 idle hours, 3 monitors each printing an 8 KB error line a second: the session gets at most its total and one short summary per monitor", () => {
    const { print, sent, scheduler, budget } = setup()
    const line = `ERROR ${"x".repeat(8_192 - 6)}`
    for (let t = 0; t < 8 * 3_600; t++) {
      for (const monitorId of ["mon_a", "mon_b", "mon_c"]) print([line], { monitorId })
      scheduler.advance(1_000)
    }
    const summaries = sent.filter((s) => s.batch.budget?.kind === "summary")
    const injected = sent.reduce((n, s) => n + s.bytes, 0)
    // Before the fix: 285 summaries of up to 48.7 KB, 13.9 MB in all.
    expect(summaries.length).toBeGreaterThanOrEqual(3)
    expect(Math.max(...summaries.map((s) => s.bytes))).toBeLessThanOrEqual(1_024)
    // The envelopes that went past the total: a summary, at most one per monitor.
    let total = 0
    const pastTotal: Sent[] = []
    for (const s of sent) {
      total += s.bytes
      if (total > 65_536) pastTotal.push(s)
    }
    expect(pastTotal.every((s) => s.batch.budget?.kind === "summary")).toBe(true)
    expect(new Set(pastTotal.map((s) => s.batch.monitorId)).size).toBe(pastTotal.length)
    expect(injected).toBeLessThanOrEqual(65_536 + pastTotal.reduce((n, s) => n + s.bytes, 0))
    expect(injected).toBeLessThanOrEqual(65_536 + 3 * 1_024)
    expect(sent.at(-1)?.at ?? Number.POSITIVE_INFINITY).toBeLessThan(3_600_000)
    expect(budget.spent("ses_1")).toBe(injected)
    expect(scheduler.now()).toBe(8 * 3_600_000)
  }, 30_000)

  test("a summary is short: its one line is cut to a few hundred bytes, and the cut is counted in dropped:", () => {
    const { print, sent, scheduler } = setup({ observation_session_bytes: 2_048 })
    print(Array.from({ length: 25 }, (_, i) => `ok ${i}`))
    print([...Array.from({ length: 29 }, (_, i) => `GET /${i} 200`), `ERROR ${"é".repeat(4_000)}`])
    scheduler.advance(300_000)
    const summary = sent.find((s) => s.batch.budget?.kind === "summary")
    expect(summary?.bytes).toBeLessThan(1_024)
    expect(summary?.batch.budget?.lines).toBe(29)
    const text = formatMonitorBatch({ batch: summary?.batch as OutputBatch, label: "dev-server" })
    const row = text.split("\n").find((r) => r.startsWith("[stdout seq=55] ")) ?? ""
    expect(row).toEndWith(" [truncated]")
    expect(Buffer.byteLength(row)).toBeLessThan(300)
    // The 29 held lines and the bytes cut from the shown one.
    const heldBytes = Array.from({ length: 29 }, (_, i) => `GET /${i} 200`).reduce((n, t) => n + t.length, 0)
    const cut = Buffer.byteLength(`ERROR ${"é".repeat(4_000)}`) - Buffer.byteLength(row.slice(16, -12))
    expect(text).toContain(`\ndropped: 29 matched, 0 unmatched (${heldBytes + cut} bytes)\n`)
  })

  test("nothing at all while the monitor is silent", () => {
    const { chatter, sent, scheduler } = setup({ observation_session_bytes: 20_000 })
    chatter(400)
    const count = sent.length
    const lastAt = scheduler.now()
    scheduler.advance(3_600_000)
    // At most the summary of what was held before the silence, then nothing.
    expect(sent.length).toBeLessThanOrEqual(count + 1)
    if (sent.length === count + 1) expect(sent.at(-1)?.batch.budget?.kind).toBe("summary")
    expect(scheduler.pendingTimers).toBe(0)
    expect(lastAt).toBe(400_000)
  })

  test("wakes are never held back and carry their own lines and the held counts", () => {
    const { chatter, print, sent } = setup({ observation_session_bytes: 1_024 })
    chatter(120)
    const wake = print(["shutting down", "bye"], { status: { kind: "exited", code: 1 } })
    const last = sent.at(-1)
    expect(last?.batch.batchSeq).toBe(wake.batchSeq)
    expect(last?.batch.lines.map((l) => lineText(l))).toEqual(["shutting down", "bye"])
    expect(last?.batch.stillRunning).toBe(false)
    expect(last?.batch.dropped.matched).toBeGreaterThan(0)
    expect(last?.batch.budget?.kind).toBe("held")
  })

  test("an exit wake whose own batch is empty carries the last line the budget held back", () => {
    const { chatter, print, sent } = setup({ observation_session_bytes: 1_024 })
    chatter(120)
    print(["chatty-last-line"])
    print([], { status: { kind: "exited", code: 3 } })
    const last = sent.at(-1)
    expect(last?.batch.stillRunning).toBe(false)
    expect(last?.batch.lines.map((l) => lineText(l))).toEqual(["chatty-last-line"])
    expect(last?.batch.budget?.kind).toBe("held")
  })

  test("the last line held is not lost to a lineless batch held after it", () => {
    const { chatter, print, sent } = setup({ observation_session_bytes: 1_024 })
    chatter(120)
    print(["chatty-last-line"])
    const count = sent.length
    print([])
    expect(sent).toHaveLength(count)
    print([], { status: { kind: "exited", code: 3 } })
    expect(sent.at(-1)?.batch.lines.map((l) => lineText(l))).toEqual(["chatty-last-line"])
  })

  test("a monitor's batches to two sessions are budgeted apart: a wake to the root carries nothing its child held", () => {
    const { chatter, print, sent, wakesLeft, scheduler } = setup()
    chatter(60, { sessionID: "ses_child" })
    expect(sent.filter((s) => s.route.sessionID === "ses_child").length).toBeGreaterThan(0)
    // Right after an envelope of the child's: this batch is held.
    print(["GET /api/items/1 200 OK in 3ms", "GET /api/items/2 200 OK in 3ms"], { sessionID: "ses_child" })
    wakesLeft.set("mon_a", 1)
    print(["GET /health 500 FAIL"], { wakeLimit: 1, route: { sessionID: "ses_root", subagentSessionID: "ses_child" } })
    const wake = sent.at(-1)
    expect(wake?.route.sessionID).toBe("ses_root")
    expect(wake?.batch.lines.map((l) => lineText(l))).toEqual(["GET /health 500 FAIL"])
    expect(wake?.batch.budget).toBeUndefined()
    expect(wake?.batch.dropped.matched).toBe(0)
    // What the child's stream held is still reported in the child's next envelope.
    const before = sent.length
    scheduler.advance(300_000)
    const next = sent.slice(before).find((s) => s.route.sessionID === "ses_child")
    expect(next?.batch.budget?.kind).toBeDefined()
    expect(next?.batch.budget?.lines).toBeGreaterThan(0)
  })

  test("a line that can still become a match wake passes straight through, with its wake_limit; past it, it is budgeted", () => {
    const { chatter, print, sent, wakesLeft, budget } = setup({ observation_session_bytes: 1_024 })
    chatter(120)
    const spent = budget.spent("ses_1")
    wakesLeft.set("mon_a", 1)
    const wake = print(["GET /health 500 FAIL"], { wakeLimit: 1 })
    const last = sent.at(-1)
    expect(last?.batch.batchSeq).toBe(wake.batchSeq)
    expect(last?.route.wake).toBe(true)
    expect(last?.wakeLimit).toBe(1)
    expect(last?.batch.lines.map((l) => lineText(l))).toEqual(["GET /health 500 FAIL"])
    // Never held back; the injector charges it as it is sent (match-wake.test.ts), not the budget here.
    expect(budget.spent("ses_1")).toBe(spent)
    // wake_limit used up: the next match is a plain observation, held back like any other line.
    wakesLeft.set("mon_a", 0)
    const count = sent.length
    print(["GET /health 500 again"], { wakeLimit: 1 })
    expect(sent).toHaveLength(count)
    // A subagent's match meant for its root session: past wake_limit the root gets none of it.
    print(["GET /health 500 a third time"], {
      wakeLimit: 1,
      route: { sessionID: "ses_root", subagentSessionID: "ses_1" },
    })
    expect(sent).toHaveLength(count)
    expect(budget.spent("ses_root")).toBe(0)
  })

  test("with streaming observations off, a match wake still comes; a match past wake_limit does not", () => {
    const { print, sent, wakesLeft } = setup({ observation_bytes_per_minute: 0 })
    wakesLeft.set("mon_a", 1)
    print(["ready on :3000"], { wakeLimit: 1 })
    expect(sent.map((s) => [s.route.wake, s.batch.lines.map((l) => lineText(l))])).toEqual([[true, ["ready on :3000"]]])
    wakesLeft.set("mon_a", 0)
    print(["ready on :3000 again"], { wakeLimit: 1 })
    expect(sent).toHaveLength(1)
  })

  test("0 turns streaming observations off; the exit wake still comes", () => {
    const { chatter, print, sent, scheduler } = setup({ observation_bytes_per_minute: 0 })
    chatter(600)
    expect(sent).toHaveLength(0)
    expect(scheduler.pendingTimers).toBe(0)
    print(["done"], { status: { kind: "exited", code: 0 } })
    expect(sent).toHaveLength(1)
    expect(sent[0]?.batch.lines.map((l) => lineText(l))).toEqual(["done"])
    expect(sent[0]?.batch.dropped.matched).toBe(6_000)
  })

  test("a monitor that ended leaves no state or timer behind", () => {
    const { chatter, print, budget, scheduler } = setup({ observation_session_bytes: 1_024 })
    chatter(20)
    chatter(20, { monitorId: "mon_b" })
    expect(budget.streamCount).toBe(2)
    print([], { status: { kind: "exited", code: 0 } })
    expect(budget.streamCount).toBe(1)
    // A stream once forgotten is never taken again: the monitor's next batch starts a new one.
    print(["back again"])
    expect(budget.streamCount).toBe(2)
    budget.forgetMonitor("mon_a")
    budget.forgetMonitor("mon_b")
    expect(budget.streamCount).toBe(0)
    expect(scheduler.pendingTimers).toBe(0)
    budget.dispose()
  })
})
