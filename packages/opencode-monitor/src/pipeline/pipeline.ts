import type { MonitorConfig } from "../config"
import { envelopeBytes } from "./render"
import type { Scheduler, TimerHandle } from "../scheduler"
import type { MonitorStatus } from "../codec"
import { type DropCounts, MonitorBatcher, type OutputBatch } from "./batcher"
import type { LineFilter } from "./filter"
import { MonitorLine, type MonitorStream } from "./line"
import { LineSplitter } from "./line-splitter"
import { MonitorRingBuffer } from "./ring-buffer"

export type PipelineOptions = {
  monitorId: string
  config: Pick<
    MonitorConfig,
    "batch_max_lines" | "batch_max_bytes" | "flush_interval_ms" | "ring_max_lines" | "line_max_bytes"
  >
  filter: LineFilter | undefined
  /** `wake_pattern`: a matching line is delivered (filtered in or not) and flushed promptly. */
  wakeFilter?: LineFilter | undefined
  /** False once the monitor's `wake_limit` is used up: a match is then a plain line, batched as any. */
  matchWakeLeft?: () => boolean
  scheduler: Scheduler
  onBatch: (batch: OutputBatch) => void
}

export type MonitorPipeline = {
  readonly ring: MonitorRingBuffer
  /** Raw bytes from one of the process's pipes. */
  push(stream: MonitorStream, chunk: Uint8Array): void
  /** The pipe reached EOF: a last line without a trailing newline is emitted. */
  endStream(stream: MonitorStream): void
  /** Emits the one terminal batch, even when the buffer was already drained. */
  finish(status: MonitorStatus): void
  /** Stops emitting batches (the ring keeps what it holds). */
  close(): void
}

/** bytes → lines → match_pattern / wake_pattern → MonitorRingBuffer → MonitorBatcher → OutputBatch. */
export function createMonitorPipeline(options: PipelineOptions): MonitorPipeline {
  const { config, filter, wakeFilter } = options
  const wakeLeft = options.matchWakeLeft ?? (() => true)
  const ring = new MonitorRingBuffer(config.ring_max_lines)
  const drops = pendingDropCounts()
  const batcher = new MonitorBatcher(
    options.monitorId,
    { maxLines: config.batch_max_lines, maxBytes: config.batch_max_bytes, intervalMs: config.flush_interval_ms },
    options.onBatch,
    { scheduler: options.scheduler, takeDropped: drops.take, measure: envelopeBytes },
  )
  const wakeFlush = promptFlush(options.scheduler, batcher)
  let seq = 0
  let finished = false
  const accept = (stream: MonitorStream, bytes: Uint8Array, truncated: boolean) => {
    const line = new MonitorLine(++seq, stream, bytes, truncated, true)
    if (filter) line.matched = filter(line.text)
    if (wakeFilter) line.wake = wakeLeft() && wakeFilter(line.text)
    const evicted = ring.push(line)
    if (evicted && !evicted.matched && !evicted.wake) {
      drops.pending.unmatched++
      drops.pending.bytes += evicted.byteLength
    }
    if (line.matched || line.wake) batcher.add(line)
    if (line.wake) wakeFlush.request()
  }
  const splitter = (stream: MonitorStream) =>
    new LineSplitter(
      config.line_max_bytes,
      (bytes, truncated) => accept(stream, bytes, truncated),
      (bytes) => {
        ring.countDroppedBytes(bytes)
        drops.pending.bytes += bytes
      },
    )
  const splitters: Record<MonitorStream, LineSplitter> = { stdout: splitter("stdout"), stderr: splitter("stderr") }

  return {
    ring,
    push(stream, chunk) {
      if (!finished) splitters[stream].push(chunk)
    },
    endStream(stream) {
      if (!finished) splitters[stream].end()
    },
    finish(status) {
      if (finished) return
      splitters.stdout.end()
      splitters.stderr.end()
      finished = true
      wakeFlush.cancel()
      batcher.flushNow({ allowEmpty: true, status })
    },
    close() {
      finished = true
      wakeFlush.cancel()
      batcher.close()
    },
  }
}

/**
 * Drops not yet reported in a batch: over-long line remainders and unmatched lines that left the
 * ring (matched lines leaving the ring were already handed to the batcher).
 */
function pendingDropCounts() {
  const pending: DropCounts = { matched: 0, unmatched: 0, bytes: 0 }
  const take = (): DropCounts => {
    const taken = { ...pending }
    pending.matched = 0
    pending.unmatched = 0
    pending.bytes = 0
    return taken
  }
  return { pending, take }
}

/**
 * A batch carrying a wake line is flushed on the next tick rather than after flush_interval_ms:
 * one timer at a time, so a flood of matching lines still fills batches instead of one per line.
 */
function promptFlush(scheduler: Scheduler, batcher: MonitorBatcher) {
  let timer: TimerHandle | undefined
  return {
    request() {
      if (timer !== undefined) return
      timer = scheduler.setTimeout(() => {
        timer = undefined
        batcher.flushNow()
      }, 0)
    },
    cancel() {
      if (timer !== undefined) scheduler.clearTimeout(timer)
      timer = undefined
    },
  }
}
