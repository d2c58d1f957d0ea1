import { MonitorLine, type MonitorStream } from "./line"

export type RingCounters = {
  total: number
  matched: number
  unmatched: number
  droppedMatched: number
  droppedUnmatched: number
  bytesDropped: number
  lastSeq: number
}

export type RingQuery = {
  stream?: "matched" | "unmatched" | "all"
  sinceSequence?: number
  limit: number
}

/** What the ring knows of a line it holds as bytes only (bits of one byte). */
export const LINE_MATCHED = 1
export const LINE_WAKE = 2
export const LINE_TRUNCATED = 4
export const LINE_STDERR = 8

/** The flags of a line from its pipe and cut, before any pattern is asked. */
export const lineFlags = (stream: MonitorStream, truncated: boolean): number =>
  (stream === "stderr" ? LINE_STDERR : 0) | (truncated ? LINE_TRUNCATED : 0)

/** The flags of a line that is an object: its pipe, cut, and what the patterns said. */
export const flagsOf = (line: MonitorLine): number =>
  lineFlags(line.stream, line.truncated) | (line.matched ? LINE_MATCHED : 0) | (line.wake ? LINE_WAKE : 0)

/**
 * The object for a line kept as `block[start, end)` with its flags. `breaks` as MonitorLine takes it:
 * 0 when not known, 1 when it cannot break into rows, 2 when it may.
 */
export function lineOf(
  block: Uint8Array,
  start: number,
  end: number,
  seq: number,
  flags: number,
  breaks: 0 | 1 | 2,
): MonitorLine {
  const stream: MonitorStream = (flags & LINE_STDERR) !== 0 ? "stderr" : "stdout"
  const truncated = (flags & LINE_TRUNCATED) !== 0
  const line = new MonitorLine(seq, stream, block, truncated, (flags & LINE_MATCHED) !== 0, start, end, breaks)
  line.wake = (flags & LINE_WAKE) !== 0
  return line
}

/** The bytes of one read buffer that lines of the ring point into, and the copy they move to. */
type BufferSpan = { buffer: ArrayBufferLike; from: number; to: number; copy: Uint8Array | undefined }

// A MonitorLine object and its byte array header, as measured with Bun (rounded up).
const LINE_OVERHEAD_BYTES = 160

/**
 * Retains the last `capacity` lines, matched and unmatched, in fixed arrays: O(1) per push, no
 * shifting. A line is kept as its range of the block it was read in; its MonitorLine is made when
 * a query hands it out (or when it came as one), so a line nobody reads never becomes an object.
 * Lines pushed out are counted, never lost silently.
 */
export class MonitorRingBuffer {
  private readonly blocks: (Uint8Array | undefined)[]
  private readonly starts: Int32Array
  private readonly ends: Int32Array
  private readonly seqs: Float64Array
  private readonly flags: Uint8Array
  private readonly made: (MonitorLine | undefined)[]
  private head = 0
  private size = 0
  /**
   * Lines that left the ring matched by nothing (no batch carried them), not yet reported in a
   * batch's `dropped:`; whoever reports them sets both back to 0.
   */
  readonly unreported = { lines: 0, bytes: 0 }
  readonly counters: RingCounters = {
    total: 0,
    matched: 0,
    unmatched: 0,
    droppedMatched: 0,
    droppedUnmatched: 0,
    bytesDropped: 0,
    lastSeq: 0,
  }

  constructor(readonly capacity: number) {
    this.blocks = new Array(capacity)
    this.made = new Array(capacity)
    this.starts = new Int32Array(capacity)
    this.ends = new Int32Array(capacity)
    this.seqs = new Float64Array(capacity)
    this.flags = new Uint8Array(capacity)
  }

  /** Keeps a line that is already an object (it was matched, delivered or decoded). */
  push(line: MonitorLine): void {
    const slot = this.pushRange(
      line.source,
      line.blockStart,
      line.blockStart + line.byteLength,
      line.seq,
      flagsOf(line),
    )
    this.made[slot] = line
  }

  /** Keeps `block[start, end)` as line `seq`; returns its slot. */
  pushRange(block: Uint8Array, start: number, end: number, seq: number, flags: number): number {
    this.count(1, seq, flags)
    return this.store(block, start, end, seq, flags)
  }

  /**
   * Keeps lines `from` to `to` (excluded) of one block with the same flags, line i being
   * `block[starts[i], ends[i])` numbered `seq + i - from`. Lines that would leave the ring before the
   * last of them came are only counted, as they would have been pushed out: a flood of tiny lines
   * writes `capacity` lines, not all.
   */
  pushRun(
    block: Uint8Array,
    starts: Int32Array,
    ends: Int32Array,
    from: number,
    to: number,
    seq: number,
    flags: number,
  ) {
    const count = to - from
    if (count <= 0) return
    this.count(count, seq + count - 1, flags)
    // The lines kept push out the ring's older ones, as line by line; those before them come and go.
    const passing = Math.max(0, count - this.capacity)
    if (passing > 0) {
      let bytes = 0
      for (let i = from; i < from + passing; i++) bytes += (ends[i] as number) - (starts[i] as number)
      this.countEvicted(passing, bytes, flags)
    }
    const keep = count - passing
    this.evictOldest(this.size + keep - this.capacity)
    const { blocks, made } = this
    let slot = this.head + this.size
    if (slot >= this.capacity) slot -= this.capacity
    for (let i = from + passing; i < to; i++) {
      blocks[slot] = block
      this.starts[slot] = starts[i] as number
      this.ends[slot] = ends[i] as number
      this.seqs[slot] = seq + i - from
      this.flags[slot] = flags
      if (made[slot] !== undefined) made[slot] = undefined
      if (++slot === this.capacity) slot = 0
    }
    this.size += keep
  }

  /** The `lines` oldest lines leave the ring (counted as store does, runs of one flags at a time). */
  private evictOldest(lines: number): void {
    let head = this.head
    let runFlags = -1
    let runLines = 0
    let runBytes = 0
    for (let k = 0; k < lines; k++) {
      const flags = this.flags[head] as number
      if (flags !== runFlags) {
        if (runLines > 0) this.countEvicted(runLines, runBytes, runFlags)
        runFlags = flags
        runLines = 0
        runBytes = 0
      }
      runLines++
      runBytes += (this.ends[head] as number) - (this.starts[head] as number)
      if (++head === this.capacity) head = 0
    }
    if (runLines > 0) this.countEvicted(runLines, runBytes, runFlags)
    if (lines > 0) {
      this.head = head
      this.size -= lines
    }
  }

  private count(lines: number, lastSeq: number, flags: number): void {
    const counters = this.counters
    counters.total += lines
    if ((flags & LINE_MATCHED) !== 0) counters.matched += lines
    else counters.unmatched += lines
    counters.lastSeq = lastSeq
  }

  private store(block: Uint8Array, start: number, end: number, seq: number, flags: number): number {
    let slot = this.head + this.size
    if (slot >= this.capacity) slot -= this.capacity
    if (this.size === this.capacity) {
      this.evict(slot)
      this.head = this.head + 1 === this.capacity ? 0 : this.head + 1
    } else {
      this.size++
    }
    this.blocks[slot] = block
    this.starts[slot] = start
    this.ends[slot] = end
    this.seqs[slot] = seq
    this.flags[slot] = flags
    this.made[slot] = undefined
    return slot
  }

  private evict(slot: number): void {
    this.countEvicted(1, (this.ends[slot] as number) - (this.starts[slot] as number), this.flags[slot] as number)
  }

  private countEvicted(lines: number, bytes: number, flags: number): void {
    if ((flags & LINE_MATCHED) !== 0) this.counters.droppedMatched += lines
    else this.counters.droppedUnmatched += lines
    this.counters.bytesDropped += bytes
    if ((flags & (LINE_MATCHED | LINE_WAKE)) === 0) {
      this.unreported.lines += lines
      this.unreported.bytes += bytes
    }
  }

  /** Bytes that never made it into a line (over-long line remainders). */
  countDroppedBytes(bytes: number): void {
    this.counters.bytesDropped += bytes
  }

  /**
   * Estimated memory of the retained lines (bytes plus a per-line object cost), after letting go of
   * their objects: an ended monitor keeps only raw bytes, made into lines again when read.
   */
  compact(): number {
    let total = 0
    for (let i = 0; i < this.size; i++) {
      const slot = this.slotAt(i)
      this.made[slot] = undefined
      total += (this.ends[slot] as number) - (this.starts[slot] as number) + LINE_OVERHEAD_BYTES
    }
    return total
  }

  /**
   * The lines from `firstSeq` on that point into a read buffer they are a small part of (a pooled
   * buffer, a flood of which the ring keeps the last lines) move to one copy of just their bytes,
   * one copy per buffer, so the ring's memory stays what its lines hold.
   */
  releaseSince(firstSeq: number): void {
    const spans: BufferSpan[] = []
    let span: BufferSpan | undefined
    let oldest = this.size
    for (let i = this.size - 1; i >= 0; i--) {
      const slot = this.slotAt(i)
      if ((this.seqs[slot] as number) < firstSeq) break
      oldest = i
      const block = this.blocks[slot] as Uint8Array
      const from = block.byteOffset + (this.starts[slot] as number)
      const to = block.byteOffset + (this.ends[slot] as number)
      if (span?.buffer !== block.buffer) span = spans.find((s) => s.buffer === block.buffer)
      if (!span) {
        span = { buffer: block.buffer, from, to, copy: undefined }
        spans.push(span)
      }
      span.from = Math.min(span.from, from)
      span.to = Math.max(span.to, to)
    }
    for (const s of spans)
      if ((s.to - s.from) * 2 < s.buffer.byteLength) s.copy = new Uint8Array(s.buffer, s.from, s.to - s.from).slice()
    if (!spans.some((s) => s.copy)) return
    span = undefined
    for (let i = oldest; i < this.size; i++) {
      const slot = this.slotAt(i)
      const block = this.blocks[slot] as Uint8Array
      if (span?.buffer !== block.buffer) span = spans.find((s) => s.buffer === block.buffer) as BufferSpan
      if (!span.copy) continue
      const shift = span.from - block.byteOffset
      this.blocks[slot] = span.copy
      this.starts[slot] = (this.starts[slot] as number) - shift
      this.ends[slot] = (this.ends[slot] as number) - shift
      this.made[slot]?.moveTo(span.copy, shift)
    }
  }

  get length(): number {
    return this.size
  }

  /** Oldest-first lines that pass the query, at most `limit` (the oldest ones after `sinceSequence`). */
  query(query: RingQuery): MonitorLine[] {
    const wanted = query.stream ?? "all"
    const since = query.sinceSequence ?? 0
    const result: MonitorLine[] = []
    for (let i = 0; i < this.size && result.length < query.limit; i++) {
      const slot = this.slotAt(i)
      if ((this.seqs[slot] as number) <= since) continue
      const matched = ((this.flags[slot] as number) & LINE_MATCHED) !== 0
      if (wanted === "matched" && !matched) continue
      if (wanted === "unmatched" && matched) continue
      result.push(this.lineAt(slot))
    }
    return result
  }

  private slotAt(index: number): number {
    const slot = this.head + index
    return slot >= this.capacity ? slot - this.capacity : slot
  }

  /** The slot's line, made from its bytes on first use. */
  private lineAt(slot: number): MonitorLine {
    const made = this.made[slot]
    if (made) return made
    const block = this.blocks[slot] as Uint8Array
    const start = this.starts[slot] as number
    const line = lineOf(
      block,
      start,
      this.ends[slot] as number,
      this.seqs[slot] as number,
      this.flags[slot] as number,
      0,
    )
    this.made[slot] = line
    return line
  }
}
