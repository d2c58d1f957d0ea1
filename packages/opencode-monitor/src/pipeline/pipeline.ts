import type { MonitorConfig } from "../config"
import type { MonitorStatus } from "../codec"
import type { Scheduler, TimerHandle } from "../scheduler"
import { type DropCounts, MonitorBatcher, NO_DROPS, type OutputBatch } from "./batcher"
import { type LineFilter, RawWordMatcher } from "./filter"
import { BreakFinder, MonitorLine, type MonitorStream } from "./line"
import { envelopeBytes, envelopeBytesBound } from "./render"
import { LineSplitter } from "./line-splitter"
import { MonitorRingBuffer } from "./ring-buffer"
import { SilenceWatch } from "./silence-watch"

export type PipelineOptions = {
  monitorId: string
  config: Pick<
    MonitorConfig,
    "batch_max_lines" | "batch_max_bytes" | "flush_interval_ms" | "ring_max_lines" | "line_max_bytes"
  >
  filter: LineFilter | undefined
  /** `wake_pattern`: a matching line is delivered (filtered in or not) and flushed promptly. */
  wakeFilter?: LineFilter | undefined
  /** `wake_on_silence_ms`: a silence this long while the process runs emits one silence wake. */
  silenceMs?: number
  /** False once the monitor's `wake_limit` is used up: a match is then a plain line, batched as any. */
  matchWakeLeft?: () => boolean
  scheduler: Scheduler
  onBatch: (batch: OutputBatch) => void
}

export type MonitorPipeline = {
  readonly ring: MonitorRingBuffer
  readonly batcher: MonitorBatcher
  /** Raw bytes from one of the process's pipes. */
  push(stream: MonitorStream, chunk: Uint8Array): void
  /** The pipe reached EOF: a last line without a trailing newline is emitted. */
  endStream(stream: MonitorStream): void
  /** The process ended: no silence wake any more (the exit is the news). */
  processEnded(): void
  /** Emits the one terminal batch, even when the buffer was already drained. */
  finish(status: MonitorStatus): void
  /** Stops emitting batches (the ring keeps what it holds). */
  close(): void
}

/** How many of the last retained lines a silence wake shows. */
const SILENCE_LINES = 10

/** bytes → lines → match_pattern / wake_pattern → MonitorRingBuffer → MonitorBatcher → OutputBatch. */
export function createMonitorPipeline(options: PipelineOptions): MonitorPipeline {
  const { config, filter, wakeFilter } = options
  const wakeLeft = options.matchWakeLeft ?? (() => true)
  const ring = new MonitorRingBuffer(config.ring_max_lines)
  // Drops not yet reported in a batch: over-long line remainders and unmatched lines that left
  // the ring (matched lines leaving the ring were already handed to the batcher).
  const pendingDrops: DropCounts = { matched: 0, unmatched: 0, bytes: 0 }
  const takeDropped = (): DropCounts => {
    if (pendingDrops.matched === 0 && pendingDrops.unmatched === 0 && pendingDrops.bytes === 0) return NO_DROPS
    const taken = { ...pendingDrops }
    pendingDrops.matched = 0
    pendingDrops.unmatched = 0
    pendingDrops.bytes = 0
    return taken
  }
  // The time of the chunk (or end of stream) whose lines are being split.
  let clock = 0
  const batcher = new MonitorBatcher(
    options.monitorId,
    { maxLines: config.batch_max_lines, maxBytes: config.batch_max_bytes, intervalMs: config.flush_interval_ms },
    options.onBatch,
    {
      scheduler: options.scheduler,
      takeDropped,
      measure: envelopeBytes,
      bound: envelopeBytesBound,
      lineTime: () => clock,
    },
  )
  let seq = 0
  let finished = false
  // A batch carrying a wake line is flushed on the next tick rather than after flush_interval_ms:
  // one timer at a time, so a flood of matching lines still fills batches instead of one per line.
  let wakeFlush: TimerHandle | undefined
  const flushForWake = () => {
    if (wakeFlush !== undefined) return
    wakeFlush = options.scheduler.setTimeout(() => {
      wakeFlush = undefined
      batcher.flushNow()
    }, 0)
  }

  // The chunk being split. Its lines are ranges of it (no copy per line); what it decides for all
  // of its lines at once: none may break into rows (no break byte in it), and where the bytes
  // alone answer a plain-words pattern.
  let block: Uint8Array | undefined
  let blockHasBreaks = false
  let blockFirstSeq = 0
  const breaks = new BreakFinder()
  const matcher = RawWordMatcher.for(filter)
  const wakeMatcher = RawWordMatcher.for(wakeFilter)

  const accept = (stream: MonitorStream, bytes: Uint8Array, start: number, end: number, truncated: boolean) => {
    const inBlock = bytes === block
    const lineBreaks = !inBlock ? 0 : blockHasBreaks && breaks.has(start, end) ? 2 : 1
    const line = new MonitorLine(++seq, stream, bytes, truncated, true, start, end, lineBreaks)
    if (filter) line.matched = (inBlock ? matcher?.test(start, end) : undefined) ?? filter(line.text)
    if (wakeFilter)
      line.wake = wakeLeft() && ((inBlock ? wakeMatcher?.test(start, end) : undefined) ?? wakeFilter(line.text))
    const evicted = ring.push(line)
    if (evicted && !evicted.matched && !evicted.wake) {
      pendingDrops.unmatched++
      pendingDrops.bytes += evicted.byteLength
    }
    if (line.matched || line.wake) batcher.add(line)
    if (line.wake) flushForWake()
  }
  const countDropped = (bytes: number) => {
    ring.countDroppedBytes(bytes)
    pendingDrops.bytes += bytes
  }
  // Lines shown with a silence wake: the last retained ones, within one batch's bounds.
  const silence =
    options.silenceMs === undefined
      ? undefined
      : new SilenceWatch(options.silenceMs, options.scheduler, () => {
          const lines = ring.query({ sinceSequence: Math.max(0, seq - SILENCE_LINES), limit: SILENCE_LINES })
          let bytes = 0
          let from = lines.length
          while (from > 0 && bytes + (lines[from - 1] as MonitorLine).byteLength <= config.batch_max_bytes)
            bytes += (lines[--from] as MonitorLine).byteLength
          batcher.emitSilence({ silentMs: options.silenceMs as number, lastSeq: seq, lines: lines.slice(from) })
        })
  const splitters: Record<MonitorStream, LineSplitter> = {
    stdout: new LineSplitter(
      config.line_max_bytes,
      (bytes, start, end, truncated) => accept("stdout", bytes, start, end, truncated),
      countDropped,
    ),
    stderr: new LineSplitter(
      config.line_max_bytes,
      (bytes, start, end, truncated) => accept("stderr", bytes, start, end, truncated),
      countDropped,
    ),
  }

  /**
   * The ring keeps lines of a chunk beyond it: when they are a small part of the memory the chunk
   * holds (a pooled read buffer, a flood of which the ring keeps the last lines), they move to a
   * copy of just their bytes, so the ring's memory stays what its lines hold.
   */
  const releaseBlock = (chunk: Uint8Array) => {
    let first: MonitorLine | undefined
    let last: MonitorLine | undefined
    ring.forEachNewest((line) => {
      if (line.seq < blockFirstSeq) return false
      if (line.isIn(chunk)) {
        last ??= line
        first = line
      }
      return true
    })
    if (!first || !last) return
    const from = first.blockStart
    const to = last.blockStart + last.byteLength
    if ((to - from) * 2 >= chunk.buffer.byteLength) return
    const copy = chunk.slice(from, to)
    ring.forEachNewest((line) => {
      if (line.seq < blockFirstSeq) return false
      if (line.isIn(chunk)) line.moveTo(copy, from)
      return true
    })
  }

  return {
    ring,
    batcher,
    push(stream, chunk) {
      if (finished) return
      silence?.output()
      clock = options.scheduler.now()
      block = chunk
      blockHasBreaks = breaks.startBlock(chunk)
      blockFirstSeq = seq + 1
      matcher?.startBlock(chunk)
      wakeMatcher?.startBlock(chunk)
      splitters[stream].push(chunk)
      block = undefined
      releaseBlock(chunk)
    },
    endStream(stream) {
      if (finished) return
      clock = options.scheduler.now()
      splitters[stream].end()
    },
    processEnded() {
      silence?.stop()
    },
    finish(status) {
      silence?.stop()
      if (finished) return
      clock = options.scheduler.now()
      splitters.stdout.end()
      splitters.stderr.end()
      finished = true
      if (wakeFlush !== undefined) options.scheduler.clearTimeout(wakeFlush)
      batcher.flushNow({ allowEmpty: true, status })
    },
    close() {
      silence?.stop()
      finished = true
      if (wakeFlush !== undefined) options.scheduler.clearTimeout(wakeFlush)
      batcher.close()
    },
  }
}
