import type { MonitorConfig } from "../config"
import type { MonitorStatus } from "../codec"
import type { Scheduler, TimerHandle } from "../scheduler"
import { LINE_MAY_BREAK } from "./batch-lines"
import { type BreakingLines, type DropCounts, MonitorBatcher, NO_DROPS, type OutputBatch } from "./batcher"
import { type LineFilter, RawWordMatcher } from "./filter"
import { BreakFinder, hasBreakByte, MonitorLine, type MonitorStream } from "./line"
import { boundOf, decimalDigits, envelopeBytes, envelopeBytesBound } from "./render"
import { SilenceWatch } from "./silence-watch"
import { type ChunkLines, LineSplitter } from "./line-splitter"
import { LINE_MATCHED, lineFlags, MonitorRingBuffer } from "./ring-buffer"

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
  const { config } = options
  const ring = new MonitorRingBuffer(config.ring_max_lines)
  const drops = pendingDropCounts(ring)
  // The time of the chunk (or end of stream) whose lines are being split.
  let clock = 0
  const batcher = batcherOf(options, drops.take, () => clock)
  const wakeFlush = promptFlush(options.scheduler, batcher)
  const chunk = new ChunkFacts(options)
  const lines = { seq: 0 }
  let finished = false
  const one = lineTaker(ring, batcher, chunk, wakeFlush, lines)
  const run = gatheredRun(options, ring, batcher, chunk, lines, one)
  const silence =
    options.silenceMs === undefined
      ? undefined
      : silenceWatch(options.silenceMs, options, ring, batcher, () => lines.seq)
  const splitters = lineSplitters(config.line_max_bytes, one, drops.cut, run)
  const release = blockRelease(options.scheduler, ring)

  return {
    ring,
    push(stream, bytes) {
      if (finished) return
      silence?.output()
      clock = options.scheduler.now()
      chunk.start(bytes, lines.seq + 1, stream)
      splitters[stream].push(bytes)
      run?.take()
      chunk.end()
      if (lines.seq >= chunk.firstSeq) release.request(chunk.firstSeq)
    },
    endStream(stream) {
      if (finished) return
      clock = options.scheduler.now()
      splitters[stream].end()
    },
    processEnded: () => silence?.stop(),
    finish(status) {
      silence?.stop()
      if (finished) return
      clock = options.scheduler.now()
      splitters.stdout.end()
      splitters.stderr.end()
      finished = true
      wakeFlush.cancel()
      release.now()
      batcher.flushNow({ allowEmpty: true, status })
    },
    close() {
      silence?.stop()
      finished = true
      wakeFlush.cancel()
      release.now()
      batcher.close()
    },
  }
}

/** A line the splitter cut: `bytes[start, end)` from `stream`. */
type AcceptLine = (stream: MonitorStream, bytes: Uint8Array, start: number, end: number, truncated: boolean) => void

/**
 * Takes each line the splitters cut (numbered from `lines.seq`): the ring keeps it, and the batcher
 * gets it when it matched. A line nothing matched stays bytes in the ring, and so does a matched one
 * its bytes decided (the batch records its range): either becomes an object only if someone reads
 * it, whether it lies in the chunk or was put together from several. The others (decided on
 * their text, wake lines) are objects from the start. Where a GatheredRun takes the lines whole in a chunk, the ones gathered there go
 * on before any line that comes here.
 */
function lineTaker(
  ring: MonitorRingBuffer,
  batcher: MonitorBatcher,
  chunk: ChunkFacts,
  wakeFlush: ReturnType<typeof promptFlush>,
  lines: { seq: number },
): AcceptLine {
  return (stream, bytes, start, end, truncated) => {
    const inChunk = bytes === chunk.current
    const seq = ++lines.seq
    if (chunk.unmatched(bytes, inChunk, start, end)) {
      ring.pushRange(bytes, start, end, seq, lineFlags(stream, truncated))
      return
    }
    const breaks = chunk.breaksOf(bytes, inChunk, start, end)
    if (chunk.decided()) {
      const flags = lineFlags(stream, truncated) | LINE_MATCHED
      ring.pushRange(bytes, start, end, seq, flags)
      const mayBreak = breaks === 2
      const size = boundOf(end - start, stream, seq, truncated, mayBreak)
      batcher.addRange(bytes, start, end, seq, mayBreak ? flags | LINE_MAY_BREAK : flags, size, !mayBreak)
      return
    }
    const line = new MonitorLine(seq, stream, bytes, truncated, true, start, end, breaks)
    chunk.complete(line)
    ring.push(line)
    if (line.matched || line.wake) batcher.add(line)
    if (line.wake) wakeFlush.request()
  }
}

/**
 * The lines whole in a chunk, gathered as the splitter cuts them (ChunkLines) and taken together,
 * in the same order and with the same flags and sizes as one by one. Taken before anything else
 * can happen to the ring or the batcher: another line, a count of dropped bytes, the end of the chunk.
 * With a words pattern (`marks`), a line that matched or may have goes on alone, as the splitter
 * would pass it; the others go on in runs.
 */
abstract class GatheredRun implements ChunkLines {
  protected starts: Int32Array = new Int32Array(1_024)
  protected ends: Int32Array = new Int32Array(1_024)
  private count = 0

  constructor(
    protected readonly ring: MonitorRingBuffer,
    protected readonly batcher: MonitorBatcher,
    protected readonly chunk: ChunkFacts,
    protected readonly lines: { seq: number },
    private readonly one: AcceptLine,
    private readonly marks: LineMarks | undefined,
  ) {}

  /** `then`, after the gathered lines are taken (a count of dropped bytes comes after them). */
  before(then: (bytes: number) => void): (bytes: number) => void {
    return (bytes) => {
      this.take()
      then(bytes)
    }
  }

  /** The next line of the chunk being split is `chunk[start, end)`. */
  add(start: number, end: number): void {
    const at = this.count++
    if (at === this.starts.length) {
      this.starts = grown(this.starts)
      this.ends = grown(this.ends)
    }
    this.starts[at] = start
    this.ends[at] = end
  }

  /** The gathered lines go on, numbered from the next seq. */
  take(): void {
    const count = this.count
    if (count === 0) return
    this.count = 0
    const { starts, ends, marks } = this
    if (marks === undefined) {
      this.run(0, count)
      return
    }
    const block = this.chunk.current as Uint8Array
    let from = 0
    let i = 0
    while (i < count) {
      // The lines that end before the next mark (a word, a classed byte) are answered by the run.
      const mark = marks.next(starts[i] as number)
      while (i < count && (ends[i] as number) <= mark) i++
      if (i === count) break
      if (marks.ask(starts[i] as number, ends[i] as number)) {
        this.run(from, i)
        from = i + 1
        this.one(this.chunk.stream, block, starts[i] as number, ends[i] as number, false)
      }
      i++
    }
    this.run(from, count)
  }

  /** Lines `from` to `to` (excluded) of the gathered ones go on together. */
  protected abstract run(from: number, to: number): void
}

/**
 * Where gathered lines need to be asked about one by one: at a word or a classed byte of a words
 * match_pattern (`match`) or wake_pattern (`wake`, while the monitor has match wakes left).
 */
class LineMarks {
  constructor(
    private readonly match: RawWordMatcher | undefined,
    private readonly wake: RawWordMatcher | undefined,
    private readonly wakeLeft: () => boolean,
  ) {}

  /** The first mark at or after `start` (Infinity: none). */
  next(start: number): number {
    const mark = this.match ? this.match.nextMark(start) : Number.POSITIVE_INFINITY
    return this.wake && this.wakeLeft() ? Math.min(mark, this.wake.nextMark(start)) : mark
  }

  /** Whether the line `[start, end)` must go on alone: a pattern matched it, or only its text can tell. */
  ask(start: number, end: number): boolean {
    if (this.match && this.match.test(start, end) !== false) return true
    return this.wake !== undefined && this.wakeLeft() && this.wake.test(start, end) !== false
  }
}

/**
 * The gathering for a pipeline's options: with no match_pattern, every line is delivered
 * (PlainRun); with one of plain words, most lines match nothing (WordsRun). A pattern that only
 * the text can answer takes its lines one by one.
 */
function gatheredRun(
  options: PipelineOptions,
  ring: MonitorRingBuffer,
  batcher: MonitorBatcher,
  chunk: ChunkFacts,
  lines: { seq: number },
  one: AcceptLine,
): GatheredRun | undefined {
  const { filter, wakeFilter } = options
  const { matcher, wakeMatcher } = chunk
  if ((filter !== undefined && !matcher) || (wakeFilter !== undefined && !wakeMatcher)) return undefined
  const marks =
    filter === undefined && wakeFilter === undefined
      ? undefined
      : new LineMarks(matcher, wakeMatcher, () => options.matchWakeLeft?.() ?? true)
  const Run = filter === undefined ? PlainRun : WordsRun
  return new Run(ring, batcher, chunk, lines, one, marks)
}

/** With no match_pattern every line is delivered: a run of lines goes to the ring and the batcher together. */
class PlainRun extends GatheredRun {
  private readonly breaking: BreakingLines = { at: new Int32Array(64), bounds: new Int32Array(64), count: 0, next: 0 }

  /** Lines `from` to `to` get their seqs and go to the ring, then to the batcher. */
  protected run(from: number, to: number): void {
    if (to <= from) return
    const { starts, ends, chunk } = this
    const firstSeq = this.lines.seq + 1
    this.lines.seq += to - from
    const block = chunk.current as Uint8Array
    const stream = chunk.stream
    const flags = lineFlags(stream, false) | LINE_MATCHED
    this.ring.pushRun(block, starts, ends, from, to, firstSeq, flags)
    const breaking = this.breakingLines(from, to, firstSeq, stream)
    let i = from
    while (i < to) {
      // Up to a seq with one more digit: sized as their bytes plus one prefix.
      const seq = firstSeq + i - from
      const sameDigits = Math.min(to, from + 10 ** decimalDigits(seq) - firstSeq)
      const extra = boundOf(0, stream, seq, false, false)
      this.batcher.addSpan(block, starts, ends, i, sameDigits, seq, flags, extra, breaking)
      i = sameDigits
    }
  }

  /** The gathered lines that hold a break byte (they may break into rows), with their size bounds. */
  private breakingLines(from: number, to: number, firstSeq: number, stream: MonitorStream): BreakingLines {
    const { starts, ends, chunk, breaking } = this
    breaking.count = 0
    breaking.next = 0
    const last = ends[to - 1] as number
    let line = from
    let at = chunk.nextBreak(starts[from] as number)
    while (at < last) {
      while ((ends[line] as number) <= at) line++
      const n = breaking.count++
      if (n === breaking.at.length) {
        breaking.at = grown(breaking.at)
        breaking.bounds = grown(breaking.bounds)
      }
      const bytes = (ends[line] as number) - (starts[line] as number)
      breaking.at[n] = line
      breaking.bounds[n] = boundOf(bytes, stream, firstSeq + line - from, false, true)
      at = chunk.nextBreak((ends[line] as number) + 1)
    }
    return breaking
  }
}

/** With a match_pattern of plain words, most lines match nothing: a run of them goes to the ring as bytes. */
class WordsRun extends GatheredRun {
  protected run(from: number, to: number): void {
    if (to <= from) return
    this.ring.pushRun(
      this.chunk.current as Uint8Array,
      this.starts,
      this.ends,
      from,
      to,
      this.lines.seq + 1,
      lineFlags(this.chunk.stream, false),
    )
    this.lines.seq += to - from
  }
}

const grown = (array: Int32Array): Int32Array => {
  const larger = new Int32Array(array.length * 2)
  larger.set(array)
  return larger
}

/**
 * The chunk being split. Its lines are ranges of it (no copy per line); what it decides with one
 * search over the chunk per byte looked for: which lines may break into rows (a break byte), and
 * where the bytes alone answer a plain-words pattern.
 */
class ChunkFacts {
  current: Uint8Array | undefined
  firstSeq = 0
  stream: MonitorStream = "stdout"
  readonly matcher: RawWordMatcher | undefined
  readonly wakeMatcher: RawWordMatcher | undefined
  private readonly breaks = new BreakFinder()
  /** The raw-bytes answers of the last `unmatched` (undefined: only the text can tell). */
  private rawMatched: boolean | undefined
  private rawWake: boolean | undefined

  constructor(private readonly options: Pick<PipelineOptions, "filter" | "wakeFilter" | "matchWakeLeft">) {
    this.matcher = RawWordMatcher.for(options.filter)
    this.wakeMatcher = RawWordMatcher.for(options.wakeFilter)
  }

  /**
   * match_pattern and wake_pattern on a line's raw bytes: true when neither matches (the line stays
   * bytes in the ring). Otherwise `complete` finishes the line with what the bytes could not tell.
   */
  unmatched(bytes: Uint8Array, inChunk: boolean, start: number, end: number): boolean {
    const { filter, wakeFilter, matchWakeLeft } = this.options
    const wakeAsked = wakeFilter !== undefined && (matchWakeLeft?.() ?? true)
    this.rawMatched = !filter ? true : rawAnswer(this.matcher, bytes, inChunk, start, end)
    this.rawWake = !wakeAsked ? false : rawAnswer(this.wakeMatcher, bytes, inChunk, start, end)
    return this.rawMatched === false && this.rawWake === false
  }

  /** After `unmatched`: the bytes decided that the line matched and is no wake (it needs no object). */
  decided(): boolean {
    return this.rawMatched === true && this.rawWake === false
  }

  /** Sets the line's matched and wake flags: from the last `unmatched` answers, or else its text. */
  complete(line: MonitorLine): void {
    const { filter, wakeFilter } = this.options
    line.matched = this.rawMatched ?? (filter as LineFilter)(line.text)
    line.wake = this.rawWake ?? (wakeFilter as LineFilter)(line.text)
  }

  start(chunk: Uint8Array, firstSeq: number, stream: MonitorStream): void {
    this.current = chunk
    this.firstSeq = firstSeq
    this.stream = stream
    this.breaks.startBlock(chunk)
    this.matcher?.startBlock(chunk)
    this.wakeMatcher?.startBlock(chunk)
  }

  end(): void {
    this.current = undefined
  }

  /** Where the chunk's first break byte at or after `start` is (Infinity: none); see BreakFinder. */
  nextBreak(start: number): number {
    return this.breaks.nextAt(start)
  }

  /** 1: `bytes[start, end)` cannot break into rows; 2: it may. A line not in the chunk is a block of its own. */
  breaksOf(bytes: Uint8Array, inChunk: boolean, start: number, end: number): 1 | 2 {
    return (inChunk ? this.breaks.has(start, end) : hasBreakByte(bytes, start, end)) ? 2 : 1
  }
}

/** A words pattern's answer on the bytes of a line: of the chunk, or of a block of its own. */
const rawAnswer = (
  matcher: RawWordMatcher | undefined,
  bytes: Uint8Array,
  inChunk: boolean,
  start: number,
  end: number,
): boolean | undefined =>
  matcher === undefined ? undefined : inChunk ? matcher.test(start, end) : matcher.testAlone(bytes, start, end)

/** Batches by the config's bounds and interval, each measured as the envelope will count it. */
function batcherOf(options: PipelineOptions, takeDropped: () => DropCounts, lineTime: () => number): MonitorBatcher {
  const { config } = options
  return new MonitorBatcher(
    options.monitorId,
    { maxLines: config.batch_max_lines, maxBytes: config.batch_max_bytes, intervalMs: config.flush_interval_ms },
    options.onBatch,
    { scheduler: options.scheduler, takeDropped, measure: envelopeBytes, bound: envelopeBytesBound, lineTime },
  )
}

/**
 * One splitter per pipe; a line's stream is the pipe it came from. With a GatheredRun, the lines
 * whole in a chunk go to it, and what it gathered goes on before any other line or count of drops.
 */
function lineSplitters(
  maxBytes: number,
  one: AcceptLine,
  cut: (bytes: number) => void,
  run: GatheredRun | undefined,
): Record<MonitorStream, LineSplitter> {
  const accept: AcceptLine = run
    ? (stream, bytes, start, end, truncated) => {
        run.take()
        one(stream, bytes, start, end, truncated)
      }
    : one
  const dropped = run ? run.before(cut) : cut
  const emit = (stream: MonitorStream) => (bytes: Uint8Array, start: number, end: number, truncated: boolean) =>
    accept(stream, bytes, start, end, truncated)
  const splitter = (stream: MonitorStream) => new LineSplitter(maxBytes, emit(stream), dropped, run)
  return { stdout: splitter("stdout"), stderr: splitter("stderr") }
}

/** A silence wake shows the last retained lines, within one batch's bounds. */
function silenceWatch(
  silenceMs: number,
  options: PipelineOptions,
  ring: MonitorRingBuffer,
  batcher: MonitorBatcher,
  lastSeq: () => number,
): SilenceWatch {
  return new SilenceWatch(silenceMs, options.scheduler, () => {
    const seq = lastSeq()
    const lines = ring.query({ sinceSequence: Math.max(0, seq - SILENCE_LINES), limit: SILENCE_LINES })
    let bytes = 0
    let from = lines.length
    while (from > 0 && bytes + (lines[from - 1] as MonitorLine).byteLength <= options.config.batch_max_bytes)
      bytes += (lines[--from] as MonitorLine).byteLength
    batcher.emitSilence({ silentMs: silenceMs, lastSeq: seq, lines: lines.slice(from) })
  })
}

/**
 * Drops not yet reported in a batch: over-long line remainders, and unmatched lines that left the
 * ring (the ring counts those; matched lines leaving it were already handed to the batcher).
 */
function pendingDropCounts(ring: MonitorRingBuffer) {
  let cutBytes = 0
  const take = (): DropCounts => {
    const evicted = ring.unreported
    if (evicted.lines === 0 && evicted.bytes === 0 && cutBytes === 0) return NO_DROPS
    const taken = { matched: 0, unmatched: evicted.lines, bytes: evicted.bytes + cutBytes }
    evicted.lines = 0
    evicted.bytes = 0
    cutBytes = 0
    return taken
  }
  /** The remainder of an over-long line, counted where monitor_output and the next batch see it. */
  const cut = (bytes: number) => {
    ring.countDroppedBytes(bytes)
    cutBytes += bytes
  }
  return { take, cut }
}

/**
 * How long after a read its lines may still point into the read buffer: a flood's lines mostly
 * leave the ring within it and are never copied, while a buffer is held at most this much longer.
 */
export const RELEASE_DELAY_MS = 20

/**
 * The ring's lines point into the blocks they were read in; RELEASE_DELAY_MS after a read, the
 * lines of a read buffer that the ring still keeps move to a copy of their bytes.
 */
function blockRelease(scheduler: Scheduler, ring: MonitorRingBuffer) {
  let timer: TimerHandle | undefined
  let since = 0
  const release = () => {
    timer = undefined
    if (since !== 0) ring.releaseSince(since)
    since = 0
  }
  return {
    /** Lines from `firstSeq` on may point into a read buffer. */
    request(firstSeq: number) {
      if (since === 0) since = firstSeq
      timer ??= scheduler.setTimeout(release, RELEASE_DELAY_MS)
    },
    /** The monitor is done reading: release what is pending at once. */
    now() {
      if (timer !== undefined) scheduler.clearTimeout(timer)
      release()
    },
  }
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
