import type { MonitorLine } from "./line"

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

// A MonitorLine object and its byte array header, as measured with Bun (rounded up).
const LINE_OVERHEAD_BYTES = 160

/**
 * Retains the last `capacity` lines, matched and unmatched, in a fixed array: O(1) per push,
 * no shifting. Lines pushed out are counted, never lost silently.
 */
export class MonitorRingBuffer {
  private readonly slots: (MonitorLine | undefined)[]
  private head = 0
  private size = 0
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
    this.slots = new Array(capacity)
  }

  push(line: MonitorLine): MonitorLine | undefined {
    const counters = this.counters
    counters.total++
    if (line.matched) counters.matched++
    else counters.unmatched++
    counters.lastSeq = line.seq
    let index = this.head + this.size
    if (index >= this.capacity) index -= this.capacity
    const evicted = this.size === this.capacity ? this.slots[index] : undefined
    this.slots[index] = line
    if (evicted) {
      this.head = this.head + 1 === this.capacity ? 0 : this.head + 1
      if (evicted.matched) counters.droppedMatched++
      else counters.droppedUnmatched++
      counters.bytesDropped += evicted.byteLength
    } else {
      this.size++
    }
    return evicted
  }

  /** Bytes that never made it into a line (over-long line remainders). */
  countDroppedBytes(bytes: number): void {
    this.counters.bytesDropped += bytes
  }

  /**
   * Estimated memory of the retained lines (bytes plus a per-line object cost), after dropping
   * their decoded text: an ended monitor keeps only raw bytes, decoded again when read.
   */
  compact(): number {
    let total = 0
    for (let i = 0; i < this.size; i++) {
      const line = this.slots[(this.head + i) % this.capacity] as MonitorLine
      line.dropText()
      total += line.byteLength + LINE_OVERHEAD_BYTES
    }
    return total
  }

  /** Visits the retained lines newest first while `visit` returns true. */
  forEachNewest(visit: (line: MonitorLine) => boolean): void {
    for (let i = this.size - 1; i >= 0; i--) {
      if (!visit(this.slots[(this.head + i) % this.capacity] as MonitorLine)) return
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
      const line = this.slots[(this.head + i) % this.capacity] as MonitorLine
      if (line.seq <= since) continue
      if (wanted === "matched" && !line.matched) continue
      if (wanted === "unmatched" && line.matched) continue
      result.push(line)
    }
    return result
  }
}
