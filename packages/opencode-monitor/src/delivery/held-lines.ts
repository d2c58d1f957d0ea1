import { addDrops, type DropCounts, NO_DROPS, type OutputBatch } from "../pipeline/batcher"
import { lineByteLength, type MonitorLine } from "../pipeline/line"

/** Held-back priority lines kept to retry in a later envelope; older ones are only counted. */
const PRIORITY_MAX = 20
/** Held lines kept to be looked at for priority lines, newest first; older ones are only counted. */
const UNLOOKED_MAX = 2_000
/** How often held lines may be looked at for priority lines (decoding them): a flood costs one look a second. */
const LOOK_INTERVAL_MS = 1_000

/** What one monitor holds back from one session since its last envelope: counts, drops, latest and priority lines. */
export class HeldLines {
  lines = 0
  bytes = 0
  firstSeq = 0
  dropped: DropCounts = NO_DROPS
  /** The latest held line, and the last batch held (its number names an envelope of held lines). */
  latest: MonitorLine | undefined
  lastBatch: OutputBatch | undefined
  /** The priority lines found so far, oldest first. */
  known: MonitorLine[] = []
  /** Held batches' lines not looked at yet, oldest first, and how many lines they hold. */
  private unlooked: (readonly MonitorLine[])[] = []
  private unlookedLines = 0
  private lookedAt = Number.NEGATIVE_INFINITY

  /** Holds a batch back: counted, and its lines looked at later unless they just were. */
  hold(batch: OutputBatch, looked = false): void {
    countHeld(this, batch.lines)
    if (batch.dropped !== NO_DROPS) this.dropped = addDrops(this.dropped, batch.dropped)
    this.latest = batch.lines.at(-1) ?? this.latest
    this.lastBatch = batch
    if (looked || batch.lines.length === 0) return
    this.unlooked.push(batch.lines)
    this.unlookedLines += batch.lines.length
    // Only the newest UNLOOKED_MAX could be looked at: older batches are only counted.
    while (this.unlookedLines - (this.unlooked[0]?.length ?? 0) >= UNLOOKED_MAX)
      this.unlookedLines -= (this.unlooked.shift() as readonly MonitorLine[]).length
  }

  get nextLookAt(): number {
    return this.lookedAt + LOOK_INTERVAL_MS
  }

  /** Whether held lines wait to be looked at. */
  get unsorted(): boolean {
    return this.unlooked.length > 0
  }

  /** The last PRIORITY_MAX priority lines, oldest first, after a look at the unlooked lines and `fresh` (newer). */
  look(isPriority: (line: MonitorLine) => boolean, now: number, fresh: readonly MonitorLine[] = []): MonitorLine[] {
    this.lookedAt = now
    const found: MonitorLine[] = []
    const unlooked = [...this.unlooked.flat(), ...fresh].slice(-UNLOOKED_MAX)
    for (let i = unlooked.length - 1; i >= 0 && found.length < PRIORITY_MAX; i--) {
      const line = unlooked[i] as MonitorLine
      if (isPriority(line)) found.push(line)
    }
    found.reverse()
    this.known = [...this.known, ...found].slice(-PRIORITY_MAX)
    this.unlooked = []
    this.unlookedLines = 0
    return this.known
  }
}

/** Adds `held` lines to a count of held lines and takes `shown` ones out of it (`firstSeq`: the oldest). */
export function countHeld(
  count: { lines: number; bytes: number; firstSeq: number },
  held: readonly MonitorLine[],
  shown: readonly MonitorLine[] = [],
): void {
  for (const line of held) {
    if (count.lines === 0 || line.seq < count.firstSeq) count.firstSeq = line.seq
    count.lines++
    count.bytes += lineByteLength(line)
  }
  for (const line of shown) {
    count.lines--
    count.bytes -= lineByteLength(line)
  }
}
