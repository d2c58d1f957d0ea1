import type { MonitorStatus } from "../codec"
import type { Scheduler, TimerHandle } from "../scheduler"
import type { MonitorLine } from "./line"

export type DropCounts = { matched: number; unmatched: number; bytes: number }

export type OutputBatch = {
  monitorId: string
  batchSeq: number
  lines: MonitorLine[]
  /** The envelope bytes of `lines` (their `size`s): what `batch_max_bytes` bounds. */
  bytes: number
  /** False only for the one terminal batch of a monitor. */
  stillRunning: boolean
  status: MonitorStatus
  /** What left retention or delivery since the previous batch (shown as `dropped:`). */
  dropped: DropCounts
  /** Set by the observation budget when it held lines back; the envelope says so. */
  budget?: BudgetNote
  /** A silence wake (`wake_on_silence_ms`): a running batch of no new lines. */
  silence?: SilenceNote
}

/** No output for `silentMs` after line `lastSeq`; `lines`: the last retained ones, already seen (not new output). */
export type SilenceNote = { silentMs: number; lastSeq: number; lines: MonitorLine[] }

/** Lines held back by the observation budget since the previous envelope (`since_sequence` reads them). */
export type BudgetNote = { kind: "held" | "summary"; lines: number; bytes: number; sinceSequence: number }

export const isTerminalBatch = (batch: OutputBatch): boolean => !batch.stillRunning

/** A running batch that carries a line matching `wake_pattern`. */
export const carriesMatch = (batch: OutputBatch): boolean => batch.lines.some((line) => line.wake)

export type BatchLimits = { maxLines: number; maxBytes: number; intervalMs: number }

export const NO_DROPS: DropCounts = Object.freeze({ matched: 0, unmatched: 0, bytes: 0 })

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

/** The envelope bytes of `lines`. */
export const sizeOf = (lines: readonly MonitorLine[]): number => lines.reduce((sum, line) => sum + line.size, 0)

/** Flushes at `maxLines`, `maxBytes` or `intervalMs` after a batch's first line; `batchSeq` rises with every flush. */
export class MonitorBatcher {
  private lines: MonitorLine[] = []
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
      /** When the line being added came (the pipeline reads the clock once per read, not per batch). */
      lineTime?: () => number
      /** While a match wake settles (`since` set), it flushes the batch, not `intervalMs`. */
      settle?: { since: number | undefined }
    },
  ) {}

  add(line: MonitorLine): void {
    if (this.closed) return
    if (this.lines.length > 0 && this.bytes + line.size > this.limits.maxBytes) this.flushNow()
    if (this.lines.length === 0) {
      this.batchStartedAt = this.deps.lineTime?.() ?? this.deps.scheduler.now()
      this.armTimer(this.limits.intervalMs)
    }
    this.lines.push(line)
    this.bytes += line.size
    if (this.lines.length >= this.limits.maxLines || this.bytes >= this.limits.maxBytes) this.flushNow()
  }

  // One timer stays armed across batches: set and cleared per batch, it would cost more than a flood's batching.
  private armTimer(delayMs: number): void {
    if (this.timer !== undefined) return
    this.timer = this.deps.scheduler.setTimeout(() => {
      this.timer = undefined
      if (this.closed || this.lines.length === 0 || this.deps.settle?.since !== undefined) return
      const waited = this.deps.scheduler.now() - this.batchStartedAt
      if (waited >= this.limits.intervalMs) this.flushNow()
      else this.armTimer(this.limits.intervalMs - waited)
    }, delayMs)
  }

  /** Nothing when empty unless `allowEmpty`; `status` makes this the terminal batch and closes the batcher. */
  flushNow(options: { allowEmpty?: boolean; status?: MonitorStatus } = {}): void {
    if (this.closed) return
    if (this.lines.length === 0 && options.allowEmpty !== true) return
    const { lines, bytes } = this
    this.lines = []
    this.bytes = 0
    if (options.status !== undefined) this.close()
    this.emit(lines, bytes, options.status)
  }

  /** A silence wake as a batch of its own (its own batchSeq), after any buffered lines. */
  emitSilence(silence: SilenceNote): void {
    if (this.closed) return
    this.flushNow()
    this.emit([], 0, undefined, silence)
  }

  // Fields written out, not spread: a flood makes thousands of batches a second.
  private emit(lines: MonitorLine[], bytes: number, status?: MonitorStatus, silence?: SilenceNote): void {
    this.batchSeq += 1
    const dropped = this.deps.takeDropped?.() ?? NO_DROPS
    const batch: OutputBatch = {
      monitorId: this.monitorId,
      batchSeq: this.batchSeq,
      lines,
      bytes,
      stillRunning: status === undefined,
      status: status ?? RUNNING,
      dropped,
    }
    if (silence) batch.silence = silence
    this.onBatch(batch)
  }

  /** Stops emitting; buffered lines stay readable in the ring buffer. */
  close(): void {
    this.closed = true
    if (this.timer !== undefined) this.deps.scheduler.clearTimeout(this.timer)
    this.timer = undefined
    this.lines = []
    this.bytes = 0
  }
}
