import { type DropCounts, NO_DROPS } from "./batcher"
import { lineByteLength, type MonitorLine } from "./line"

export type RingQuery = {
  stream?: "matched" | "unmatched" | "all"
  sinceSequence?: number
  limit: number
}

// A line record and its share of a copied block, as measured with Bun (rounded up).
const LINE_OVERHEAD_BYTES = 160

export type RingCounters = MonitorRingBuffer["counters"]

/** The last `capacity` lines in a fixed array: O(1) per push; lines pushed out are counted, never lost silently. */
export class MonitorRingBuffer {
  private readonly lines: (MonitorLine | undefined)[]
  private head = 0
  private size = 0
  /** Drops a batch's `dropped:` has not reported yet: lines that left matched by nothing, bytes cut off lines. */
  readonly unreported = { lines: 0, bytes: 0 }
  readonly counters = {
    total: 0,
    matched: 0,
    unmatched: 0,
    droppedMatched: 0,
    droppedUnmatched: 0,
    bytesDropped: 0,
    lastSeq: 0,
  }

  constructor(readonly capacity: number) {
    this.lines = new Array(capacity)
  }

  push(line: MonitorLine): void {
    const counters = this.counters
    counters.total++
    if (line.matched) counters.matched++
    else counters.unmatched++
    counters.lastSeq = line.seq
    const slot = this.slotAt(this.size)
    if (this.size === this.capacity) {
      this.evicted(this.lines[slot] as MonitorLine)
      this.head = this.head + 1 === this.capacity ? 0 : this.head + 1
    } else {
      this.size++
    }
    this.lines[slot] = line
  }

  private evicted(line: MonitorLine): void {
    const bytes = lineByteLength(line)
    if (line.matched) this.counters.droppedMatched++
    else this.counters.droppedUnmatched++
    this.counters.bytesDropped += bytes
    if (!line.matched && !line.wake) {
      this.unreported.lines++
      this.unreported.bytes += bytes
    }
  }

  /** Bytes that never made it into a line (over-long line remainders). */
  countDroppedBytes(bytes: number): void {
    this.counters.bytesDropped += bytes
    this.unreported.bytes += bytes
  }

  /** The drops not yet reported, for the next batch; the count starts afresh. */
  takeUnreported(): DropCounts {
    const { lines, bytes } = this.unreported
    if (lines === 0 && bytes === 0) return NO_DROPS
    this.unreported.lines = 0
    this.unreported.bytes = 0
    return { matched: 0, unmatched: lines, bytes }
  }

  /**
   * The lines since `sinceSeq` in `read`'s buffer move to one copy of their bytes when they hold less than half
   * of it: a retained line must not keep a pipe's 64 KB buffer alive. Asked once the next read comes, so the
   * pieces of one read are judged together.
   */
  release(read: ArrayBufferLike, sinceSeq: number): void {
    const inRead: MonitorLine[] = []
    let from = Number.POSITIVE_INFINITY
    let to = 0
    for (let i = this.size - 1; i >= 0; i--) {
      const line = this.lines[this.slotAt(i)] as MonitorLine
      if (line.seq < sinceSeq) break
      // A line put together from two reads has a block of its own.
      if (line.block.buffer !== read) continue
      inRead.push(line)
      from = Math.min(from, line.block.byteOffset + line.start)
      to = Math.max(to, line.block.byteOffset + line.end)
    }
    if (inRead.length === 0 || (to - from) * 2 >= read.byteLength) return
    const copy = new Uint8Array(read.slice(from, to))
    for (const line of inRead) {
      const shift = line.block.byteOffset - from
      line.block = copy
      line.start += shift
      line.end += shift
    }
  }

  /** Estimated memory of the retained lines (an ended monitor's, for the server-wide retention bound). */
  compact(): number {
    let total = 0
    for (let i = 0; i < this.size; i++) total += lineByteLength(this.lines[this.slotAt(i)] as MonitorLine)
    return total + this.size * LINE_OVERHEAD_BYTES
  }

  /** Oldest-first lines that pass the query, at most `limit` (the oldest ones after `sinceSequence`). */
  query(query: RingQuery): MonitorLine[] {
    const wanted = query.stream ?? "all"
    const since = query.sinceSequence ?? 0
    const result: MonitorLine[] = []
    for (let i = 0; i < this.size && result.length < query.limit; i++) {
      const line = this.lines[this.slotAt(i)] as MonitorLine
      if (line.seq <= since) continue
      if (wanted === "matched" && !line.matched) continue
      if (wanted === "unmatched" && line.matched) continue
      result.push(line)
    }
    return result
  }

  /** The newest `limit` lines that pass `keep`, oldest first. */
  latest(limit: number, keep: (line: MonitorLine) => boolean = () => true): MonitorLine[] {
    const result: MonitorLine[] = []
    for (let i = this.size - 1; i >= 0 && result.length < limit; i--) {
      const line = this.lines[this.slotAt(i)] as MonitorLine
      if (keep(line)) result.push(line)
    }
    return result.reverse()
  }

  private slotAt(index: number): number {
    const slot = this.head + index
    return slot >= this.capacity ? slot - this.capacity : slot
  }
}
