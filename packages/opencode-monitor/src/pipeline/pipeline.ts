import type { MonitorStatus } from "../codec"
import type { MonitorConfig } from "../config"
import type { Scheduler } from "../scheduler"
import { MonitorBatcher, type OutputBatch, sizeOf } from "./batcher"
import type { LineFilter } from "./filter"
import { lineText, type MonitorLine, type MonitorStream } from "./line"
import { LineSplitter } from "./line-splitter"
import { fittedEnd, isPlainSpan, plainRowBytes, renderedSize } from "./render"
import { MonitorRingBuffer } from "./ring-buffer"
import { SilenceWatch } from "./silence-watch"
import { WakeSettle } from "./wake-settle"

export type PipelineOptions = {
  monitorId: string
  config: Pick<
    MonitorConfig,
    "batch_max_lines" | "batch_max_bytes" | "flush_interval_ms" | "ring_max_lines" | "line_max_bytes" | "wake_settle_ms"
  >
  filter: LineFilter | undefined
  /** `wake_pattern`: a matching line is delivered (filtered in or not), with the lines that follow it. */
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

/** bytes → lines (split and numbered once) → match_pattern / wake_pattern → ring and batcher → OutputBatch. */
export function createMonitorPipeline(options: PipelineOptions): MonitorPipeline {
  const { config, scheduler } = options
  const ring = new MonitorRingBuffer(config.ring_max_lines)
  const read = new ReadFacts()
  const settle = new WakeSettle(scheduler, config.wake_settle_ms, () => batcher.flushNow())
  const batcher = new MonitorBatcher(
    options.monitorId,
    { maxLines: config.batch_max_lines, maxBytes: config.batch_max_bytes, intervalMs: config.flush_interval_ms },
    options.onBatch,
    { scheduler, takeDropped: () => ring.takeUnreported(), lineTime: () => read.at, settle },
  )
  const accept = lineIntake(options, { ring, batcher, settle, read })
  const splitter = (stream: MonitorStream) =>
    new LineSplitter(
      config.line_max_bytes,
      (block, start, end, truncated) => accept(stream, block, start, end, truncated),
      (bytes) => ring.countDroppedBytes(bytes),
    )
  const splitters = { stdout: splitter("stdout"), stderr: splitter("stderr") }
  const silence = options.silenceMs === undefined ? undefined : silenceWatch(options, ring, batcher)
  let finished = false
  const release = readRelease(ring)
  const stopAll = () => {
    silence?.stop()
    settle.cancel()
    finished = true
    release()
  }

  return {
    ring,
    push(stream, bytes) {
      if (finished) return
      silence?.output()
      release(bytes.buffer)
      read.start(bytes, scheduler.now())
      splitters[stream].push(bytes)
    },
    endStream(stream) {
      if (!finished) splitters[stream].end()
    },
    processEnded: () => silence?.stop(),
    finish(status) {
      if (finished) return
      splitters.stdout.end()
      splitters.stderr.end()
      stopAll()
      batcher.flushNow({ allowEmpty: true, status })
    },
    close() {
      stopAll()
      batcher.close()
    },
  }
}

/** Releases the last read's retained lines once another read comes (`next`), or at the end (none). */
function readRelease(ring: MonitorRingBuffer): (next?: ArrayBufferLike) => void {
  let lastRead: ArrayBufferLike | undefined
  let lastReadSeq = 0
  return (next) => {
    if (lastRead === next) return
    if (lastRead !== undefined) ring.release(lastRead, lastReadSeq)
    lastRead = next
    lastReadSeq = ring.counters.lastSeq + 1
  }
}

/** Each line the splitters cut: numbered, judged, kept, batched when delivered; a wake line starts the settle. */
function lineIntake(
  options: PipelineOptions,
  parts: { ring: MonitorRingBuffer; batcher: MonitorBatcher; settle: WakeSettle; read: ReadFacts },
) {
  const { ring, batcher, settle, read } = parts
  const maxBytes = options.config.batch_max_bytes
  const judge = patternJudge(options, read)
  let seq = 0
  return (stream: MonitorStream, block: Uint8Array, start: number, end: number, truncated: boolean): void => {
    const line: MonitorLine = {
      seq: ++seq,
      stream,
      block,
      start,
      end,
      truncated,
      matched: true,
      wake: false,
      size: 0,
    }
    const text = judge?.(line)
    ring.push(line)
    if (!line.matched && !line.wake) return
    line.size = read.size(line, text)
    batcher.add(line.size > maxBytes ? fitToEnvelope(line, maxBytes, ring) : line)
    if (judge === undefined) return
    if (line.wake) settle.wake(read.at)
    else settle.line(read.at)
  }
}

// Bytes that decoding or sanitizing may change: a control byte, DEL, or the lead byte of a character sanitizing
// removes or breaks on (U+0080–U+009F, U+061C, U+180E, U+2000–U+206F, U+FEFF, U+FFF9–U+FFFB, tags).
const TOUCHED = new Uint8Array(256)
for (const byte of [0x7f, 0xc2, 0xd8, 0xe1, 0xe2, 0xef, 0xf3]) TOUCHED[byte] = 1
for (let byte = 0; byte < 0x20; byte++) if (byte !== 9 && byte !== 10) TOUCHED[byte] = 1

/** The end of the colour sequence at `at` (ESC [, digits and semicolons, m), or -1. */
function colourEnd(block: Uint8Array, at: number, end: number): number {
  let i = at + 2
  while (i < end && (block[i] === 0x3b || ((block[i] as number) >= 0x30 && (block[i] as number) <= 0x39))) i++
  return block[at] === 0x1b && block[at + 1] === 0x5b && i < end && block[i] === 0x6d ? i + 1 : -1
}

/** The read being split, looked at once: when it came, and whether its whole lines are all plain (`isPlainSpan`). */
class ReadFacts {
  private block: Uint8Array | undefined
  /** The read as a Buffer, for native searches, and how many reads came before it. */
  bytes: Buffer = Buffer.alloc(0)
  count = 0
  at = 0
  private from = 0
  private plain = false
  /** A line's bytes without its colour sequences (`textBytes`). */
  scratch = Buffer.alloc(1_024)

  start(block: Uint8Array, at: number): void {
    this.block = block
    this.bytes = Buffer.isBuffer(block) ? block : Buffer.from(block.buffer, block.byteOffset, block.length)
    this.count++
    this.at = at
    const first = block.indexOf(10)
    this.from = first + 1
    this.plain = first !== -1 && isPlainSpan(block, this.from, block.lastIndexOf(10))
  }

  /**
   * A word is in `line`'s text exactly when its bytes are: in the line's range of this read (`true`: no
   * TOUCHED byte), or in `scratch[0, n)` (`n`: the range without its colour sequences, no other TOUCHED
   * byte; sanitizing keeps every ASCII byte but the sequences, in order); undefined: decode the text.
   */
  textBytes(line: MonitorLine): true | number | undefined {
    const { block, start, end } = line
    if (block !== this.block) return undefined
    for (let at = start; at < end; at++) {
      const byte = block[at] as number
      // 0xe2 leads U+2000–U+206F only before 0x80 or 0x81: the arrows, ticks and box drawing of dev tools are plain.
      if (TOUCHED[byte] === 1 && (byte !== 0xe2 || (block[at + 1] as number) < 0x82)) return this.uncoloured(line)
    }
    return true
  }

  private uncoloured({ block, start, end }: MonitorLine): number | undefined {
    if (this.scratch.length < end - start) this.scratch = Buffer.alloc(2 * (end - start))
    const scratch = this.scratch
    let n = 0
    for (let at = start; at < end; at++) {
      const byte = block[at] as number
      if (TOUCHED[byte] === 1 && (byte !== 0xe2 || (block[at + 1] as number) < 0x82)) {
        const after = colourEnd(block, at, end)
        if (after === -1) return undefined
        at = after - 1
      } else scratch[n++] = byte
    }
    return n
  }

  /** The line's envelope bytes: `plainRowBytes` for a plain line, else measured on its text. */
  size(line: MonitorLine, text?: string): number {
    const { block, start, end } = line
    const plain =
      block === this.block && start >= this.from && this.from > 0 ? this.plain : isPlainSpan(block, start, end)
    return plain ? plainRowBytes(end - start, line.stream, line.seq, line.truncated) : renderedSize(line, text)
  }
}

/** A word pattern's words, looked for in each read natively, each once a read: its lines come in order. */
class Needles {
  private next: number[] = []
  private read = -1

  constructor(readonly needles: Buffer[]) {}

  /** Whether one of the needles lies wholly within `[start, end)` of the read being split. */
  within(read: ReadFacts, start: number, end: number): boolean {
    if (this.read !== read.count) {
      this.read = read.count
      this.next = this.needles.map(() => -1)
    }
    let found = false
    for (let i = 0; i < this.needles.length; i++) {
      const needle = this.needles[i] as Buffer
      let at = this.next[i] as number
      if (at < start) {
        at = read.bytes.indexOf(needle, start)
        at = at === -1 ? Number.POSITIVE_INFINITY : at
        this.next[i] = at
      }
      if (at + needle.length <= end) found = true
    }
    return found
  }
}

/**
 * Sets a line's `matched` and `wake`: on its bytes when every pattern is plain words and the bytes show
 * its words (`textBytes`), else on its decoded text, which it returns for the size. Undefined without patterns.
 */
function patternJudge(
  options: PipelineOptions,
  read: ReadFacts,
): ((line: MonitorLine) => string | undefined) | undefined {
  const { filter, wakeFilter, matchWakeLeft } = options
  if (!filter && !wakeFilter) return undefined
  const words = (f: LineFilter | undefined) => f?.words && new Needles(f.words.map((word) => Buffer.from(word)))
  const matchWords = words(filter)
  const wakeWords = words(wakeFilter)
  const onBytes = (!filter || matchWords) && (!wakeFilter || wakeWords)
  const judge = (line: MonitorLine, f: LineFilter, needles: Needles | undefined, on: true | number | string) => {
    if (on === true) return (needles as Needles).within(read, line.start, line.end)
    if (typeof on === "string") return f(on)
    // Searched back from where a word would end at `on`: past it lie an earlier line's bytes.
    return (needles as Needles).needles.some((n) => on >= n.length && read.scratch.lastIndexOf(n, on - n.length) !== -1)
  }
  return (line) => {
    const on = (onBytes ? read.textBytes(line) : undefined) ?? lineText(line)
    if (filter) line.matched = judge(line, filter, matchWords, on)
    if (wakeFilter && (matchWakeLeft?.() ?? true)) line.wake = judge(line, wakeFilter, wakeWords, on)
    return typeof on === "string" ? on : undefined
  }
}

/**
 * A line whose text outgrows one envelope (invalid UTF-8 triples, visual breaks add rows) is batched cut
 * to fit, marked truncated; the cut bytes show in `dropped:`, but the ring keeps the line whole.
 */
function fitToEnvelope(line: MonitorLine, maxBytes: number, ring: MonitorRingBuffer): MonitorLine {
  const end = fittedEnd(line, maxBytes)
  ring.unreported.bytes += line.end - end
  const cut = { ...line, end, truncated: true }
  cut.size = renderedSize(cut)
  return cut
}

/** A silence wake shows the last retained lines that were delivered (never a filtered one), within one batch. */
function silenceWatch(options: PipelineOptions, ring: MonitorRingBuffer, batcher: MonitorBatcher): SilenceWatch {
  return new SilenceWatch(options.silenceMs as number, options.scheduler, (silentMs) => {
    const lines = ring.latest(SILENCE_LINES, (line) => line.matched || line.wake)
    while (lines.length > 0 && sizeOf(lines) > options.config.batch_max_bytes) lines.shift()
    batcher.emitSilence({ silentMs, lastSeq: ring.counters.lastSeq, lines })
  })
}
