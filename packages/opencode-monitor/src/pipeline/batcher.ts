import type { Scheduler, TimerHandle } from "../scheduler"
import type { MonitorStatus } from "../codec"
import { BatchLines, LINE_MAY_BREAK, RecordedBatch, recordedLine } from "./batch-lines"
import type { MonitorLine } from "./line"

export type DropCounts = { matched: number; unmatched: number; bytes: number }

export type OutputBatch = {
  monitorId: string
  batchSeq: number
  lines: MonitorLine[]
  /** False only for the one terminal batch of a monitor. */
  stillRunning: boolean
  status: MonitorStatus
  /** What left retention or delivery since the previous batch (shown as `dropped:`). */
  dropped: DropCounts
  /** Set by the observation budget (delivery/budget.ts) when it held lines back; the envelope says so. */
  budget?: BudgetNote
  /** A silence wake (`wake_on_silence_ms`, SPEC §15): a running batch of no new lines. */
  silence?: SilenceNote
}

/**
 * Why a silence wake was made: no output for `silentMs`, the last line was `lastSeq`, and the last
 * retained lines to show with it (already seen lines, so never counted as new output).
 */
export type SilenceNote = { silentMs: number; lastSeq: number; lines: MonitorLine[] }

/** Lines held back by the observation budget since the previous envelope (`since_sequence` reads them). */
export type BudgetNote = { kind: "held" | "summary"; lines: number; bytes: number; sinceSequence: number }

export const isTerminalBatch = (batch: OutputBatch): boolean => !batch.stillRunning

export type BatchLimits = { maxLines: number; maxBytes: number; intervalMs: number }

/**
 * The lines of a run that may break into rows (ascending indices in the run), each with its size
 * bound; `next` is the first not yet added to a batch.
 */
export type BreakingLines = { at: Int32Array; bounds: Int32Array; count: number; next: number }

export const NO_DROPS: DropCounts = Object.freeze({ matched: 0, unmatched: 0, bytes: 0 })

const NO_OPTIONS = {}

/** The status of every running batch (one object: a flood makes thousands of batches a second). */
const RUNNING: MonitorStatus = Object.freeze({ kind: "running" })

/** Drop counts added up: the one place they are summed (budget, coalescing, match-wake merges). */
export function addDrops(...counts: DropCounts[]): DropCounts {
  const sum = { matched: 0, unmatched: 0, bytes: 0 }
  for (const c of counts) {
    sum.matched += c.matched
    sum.unmatched += c.unmatched
    sum.bytes += c.bytes
  }
  return sum
}

/**
 * Groups matched lines into batches: flushes when a batch reaches `maxLines` lines or
 * `maxBytes` UTF-8 bytes (as `measure` counts them: what the envelope will hold for the line,
 * prefixes included), or `intervalMs` after its first line. `batchSeq` is strictly
 * monotonic across real and empty flushes.
 *
 * `bound` (an upper bound of `measure`, cheap) stands in for `measure` until a limit might be
 * reached: only then are the batch's lines measured, so a line that needs decoding to be measured
 * is decoded only when its size can change where a batch ends. The batches are the same.
 */
export class MonitorBatcher {
  private lines: BatchLines
  /** The batch's lines whose size so far is their `bound` (their index), and that size. */
  private readonly bounded: number[] = []
  private readonly boundedSizes: number[] = []
  private bytes = 0
  private batchSeq = 0
  private batchStartedAt = 0
  private timer: TimerHandle | undefined
  private closed = false

  constructor(
    private readonly monitorId: string,
    private readonly limits: BatchLimits,
    private readonly onBatch: (batch: OutputBatch) => void,
    private readonly deps: {
      scheduler: Scheduler
      takeDropped?: () => DropCounts
      measure?: (line: MonitorLine) => number
      bound?: (line: MonitorLine) => number
      /**
       * When a batch's first line came (default `scheduler.now()`): the pipeline reads the clock once
       * per chunk, not once per batch of a flood.
       */
      lineTime?: () => number
    },
  ) {
    this.measure = deps.measure ?? ((line) => line.byteLength)
    this.bound = deps.bound ?? this.measure
    this.lines = new BatchLines(limits.maxLines)
  }

  private readonly measure: (line: MonitorLine) => number
  private readonly bound: (line: MonitorLine) => number

  add(line: MonitorLine): void {
    if (this.closed) return
    let size = this.bound(line)
    if (this.overflows(size)) {
      size = this.measure(line)
      if (this.bytes + size > this.limits.maxBytes) this.flushNow()
    }
    this.opening()
    this.lines.addLine(line)
    this.added(size, this.bound === this.measure)
  }

  /**
   * A line kept as `block[start, end)` with its flags (see BatchLines), made an object only if it
   * must be measured: `size` is what `measure` gives for it when `exact`, else what `bound` gives.
   */
  addRange(block: Uint8Array, start: number, end: number, seq: number, flags: number, size: number, exact: boolean) {
    if (this.closed) return
    if (this.overflows(size)) {
      // Where the batch ends depends on its measured size: that takes the line's text.
      if (!exact) return this.add(recordedLine(block, start, end, seq, flags))
      if (this.bytes + size > this.limits.maxBytes) this.flushNow()
    }
    this.opening()
    this.lines.addRange(block, start, end, seq, flags)
    this.added(size, exact)
  }

  /**
   * Lines `from` to `to` (excluded) of a run in `block`, line i being `block[starts[i], ends[i])`,
   * numbered on from `seq`, all with `flags`: what as many `addRange` calls would do. Each is sized
   * as its bytes plus `extra`, but for those `breaking` lists (they may break into rows), sized by
   * their bound until measured. The lines of a run lie one after the other, each ended by one
   * newline byte (`starts[i + 1]` is `ends[i] + 1`), so the size of any of them together is known
   * without adding them up; lines go one by one only where a batch may end on their bytes.
   */
  addSpan(
    block: Uint8Array,
    starts: Int32Array,
    ends: Int32Array,
    from: number,
    to: number,
    seq: number,
    flags: number,
    extra: number,
    breaking: BreakingLines,
  ) {
    const { maxLines, maxBytes } = this.limits
    let i = from
    while (i < to) {
      if (this.closed) return
      const lines = this.lines
      const end = Math.min(to, i + maxLines - lines.length)
      let size = (ends[end - 1] as number) - (starts[i] as number) - (end - i - 1) + (end - i) * extra
      let b = breaking.next
      for (; b < breaking.count && (breaking.at[b] as number) < end; b++) {
        const line = breaking.at[b] as number
        size += (breaking.bounds[b] as number) - ((ends[line] as number) - (starts[line] as number) + extra)
      }
      if (this.bytes + size > maxBytes) {
        const start = starts[i] as number
        const stop = ends[i] as number
        if (breaking.next < breaking.count && breaking.at[breaking.next] === i) {
          const bound = breaking.bounds[breaking.next++] as number
          this.addRange(block, start, stop, seq + i - from, flags | LINE_MAY_BREAK, bound, false)
        } else {
          this.addRange(block, start, stop, seq + i - from, flags, stop - start + extra, true)
        }
        i++
        continue
      }
      this.opening()
      // Line k of the run is line `shift + k` of the batch.
      const shift = lines.length - i
      lines.addSpan(block, starts, ends, i, end, seq + i - from, flags)
      for (; breaking.next < b; breaking.next++) {
        const at = shift + (breaking.at[breaking.next] as number)
        lines.markMayBreak(at)
        this.bounded.push(at)
        this.boundedSizes.push(breaking.bounds[breaking.next] as number)
      }
      this.bytes += size
      i = end
      if (lines.length >= maxLines) this.flushNow()
      else if (this.bytes >= maxBytes) {
        this.measureAll()
        if (this.bytes >= maxBytes) this.flushNow()
      }
    }
  }

  /** Whether a line of `size` might not fit; the batch's lines are then measured. */
  private overflows(size: number): boolean {
    if (this.lines.length === 0 || this.bytes + size <= this.limits.maxBytes) return false
    this.measureAll()
    return true
  }

  /** Before the first line of a batch: when it started, and its interval's timer. */
  private opening(): void {
    if (this.lines.length > 0) return
    this.batchStartedAt = this.deps.lineTime?.() ?? this.deps.scheduler.now()
    this.armTimer(this.limits.intervalMs)
  }

  /** After a line of `size` (its bound unless `exact`) joined the batch: flushes at a bound. */
  private added(size: number, exact: boolean): void {
    if (!exact) {
      this.bounded.push(this.lines.length - 1)
      this.boundedSizes.push(size)
    }
    this.bytes += size
    if (this.lines.length >= this.limits.maxLines) this.flushNow()
    else if (this.bytes >= this.limits.maxBytes) {
      this.measureAll()
      if (this.bytes >= this.limits.maxBytes) this.flushNow()
    }
  }

  /** Replaces the bounds of the batch's lines by their measured sizes. */
  private measureAll(): void {
    for (let i = 0; i < this.bounded.length; i++) {
      const size = this.measure(this.lines.line(this.bounded[i] as number))
      this.bytes += size - (this.boundedSizes[i] as number)
    }
    this.forgetBounds()
  }

  private forgetBounds(): void {
    this.bounded.length = 0
    this.boundedSizes.length = 0
  }

  // One timer stays armed across batches: a flood makes thousands of batches a second, and a
  // timer set and cleared for each would cost more than the batching itself.
  private armTimer(delayMs: number): void {
    if (this.timer !== undefined) return
    this.timer = this.deps.scheduler.setTimeout(() => {
      this.timer = undefined
      if (this.closed || this.lines.length === 0) return
      const waited = this.deps.scheduler.now() - this.batchStartedAt
      if (waited >= this.limits.intervalMs) this.flushNow()
      else this.armTimer(this.limits.intervalMs - waited)
    }, delayMs)
  }

  /**
   * Emits the buffered lines as a batch. An empty buffer emits nothing unless `allowEmpty`;
   * passing `status` makes this the terminal batch (`stillRunning: false`) and closes the batcher.
   */
  flushNow(options: { allowEmpty?: boolean; status?: MonitorStatus } = NO_OPTIONS): void {
    if (this.closed) return
    if (this.lines.length === 0 && options.allowEmpty !== true) return
    const lines = this.lines
    this.batchSeq += 1
    const terminal = options.status !== undefined
    if (terminal) this.close()
    else this.reset()
    const status = options.status ?? RUNNING
    const dropped = this.deps.takeDropped?.() ?? NO_DROPS
    this.onBatch(new RecordedBatch(this.monitorId, this.batchSeq, !terminal, status, dropped, lines))
  }

  /** A silence wake as a batch of its own (its own batchSeq), after any buffered lines. */
  emitSilence(silence: SilenceNote): void {
    if (this.closed) return
    this.flushNow()
    this.batchSeq += 1
    this.onBatch({
      monitorId: this.monitorId,
      batchSeq: this.batchSeq,
      lines: [],
      stillRunning: true,
      status: RUNNING,
      dropped: this.deps.takeDropped?.() ?? NO_DROPS,
      silence,
    })
  }

  /** Stops emitting; buffered lines stay readable in the ring buffer. */
  close(): void {
    this.closed = true
    if (this.timer !== undefined) this.deps.scheduler.clearTimeout(this.timer)
    this.timer = undefined
    this.reset()
  }

  private reset(): void {
    this.lines = new BatchLines(this.limits.maxLines)
    if (this.bounded.length > 0) this.forgetBounds()
    this.bytes = 0
  }
}
