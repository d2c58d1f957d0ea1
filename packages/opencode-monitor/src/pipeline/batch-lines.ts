import type { OutputBatch } from "./batcher"
import type { MonitorLine } from "./line"
import { flagsOf, LINE_MATCHED, LINE_WAKE, lineOf } from "./ring-buffer"

/** A flag of a recorded line besides the ring's: it has a byte that may break it into rows. */
export const LINE_MAY_BREAK = 16

/** Int32 records per line: start, end, flags (its seq is in a Float64Array beside). */
const INTS = 3
/** A line's LINE_* flags take the low byte of its flags column; its block's index is above. */
const BLOCK_SHIFT = 8
const FLAGS_MASK = (1 << BLOCK_SHIFT) - 1
/** Room made at once for this many lines at most (`batch_max_lines` may be far larger). */
const PREALLOCATED_MAX = 512

/**
 * The lines of one batch as the pipeline cut them: each a range of the block it was read in, with
 * its seq and flags (the ring's LINE_* bits). A line becomes a MonitorLine only when someone asks
 * for it (an envelope, the budget's choice), and then always the same object; a batch that the
 * budget holds back and nobody reads never makes one.
 */
export class BatchLines {
  /** The blocks the lines are ranges of, each once per run of lines in it (a batch mostly has one). */
  private readonly blocks: Uint8Array[] = []
  /** Per line: start, end, and flags with its block's index above them; made at the first line. */
  private ints: Int32Array | undefined
  private seqs: Float64Array | undefined
  private room: number
  /** The block of the last line added, and its index as it stands in the flags column. */
  private lastBlock: Uint8Array | undefined
  private blockBits = 0
  private count = 0
  private madeLines: (MonitorLine | undefined)[] | undefined
  private array: MonitorLine[] | undefined
  /** The lines' bytes, all together. */
  bytes = 0
  /** The smallest seq (the first, for a batch the pipeline made). */
  firstSeq = 0
  /** Lines that matched `wake_pattern`. */
  wakes = 0

  /** `capacity`: how many lines it will likely hold (room is taken at the first line, up to a bound). */
  constructor(capacity = 0) {
    this.room = Math.max(1, Math.min(capacity, PREALLOCATED_MAX))
  }

  /** The records of lines that are objects already (a batch built by hand, or merged). */
  static of(lines: readonly MonitorLine[]): BatchLines {
    const records = new BatchLines(lines.length)
    for (const line of lines) records.addLine(line)
    return records
  }

  get length(): number {
    return this.count
  }

  /** Room for `lines` more lines: made at the first line, or made larger with the records copied over. */
  private ensure(lines: number): Int32Array {
    const ints = this.ints
    if (ints !== undefined && this.count + lines <= this.room) return ints
    const room = ints === undefined ? Math.max(this.room, lines) : Math.max(2 * this.room, this.count + lines)
    const larger = new Int32Array(room * INTS)
    const seqs = new Float64Array(room)
    if (ints !== undefined) {
      larger.set(ints.subarray(0, this.count * INTS))
      seqs.set((this.seqs as Float64Array).subarray(0, this.count))
    }
    this.ints = larger
    this.seqs = seqs
    this.room = room
    return larger
  }

  /** The line `block[start, end)`, with its LINE_* flags (LINE_MAY_BREAK included). */
  addRange(block: Uint8Array, start: number, end: number, seq: number, flags: number): void {
    const ints = this.ensure(1)
    const at = this.count++
    if (at === 0 || seq < this.firstSeq) this.firstSeq = seq
    ints[at * INTS] = start
    ints[at * INTS + 1] = end
    ints[at * INTS + 2] = flags | this.blockBitsOf(block)
    const seqs = this.seqs as Float64Array
    seqs[at] = seq
    this.bytes += end - start
    if ((flags & LINE_WAKE) !== 0) this.wakes++
    this.array = undefined
  }

  /**
   * Lines `from` to `to` (excluded) of a run in `block`, line i being `block[starts[i], ends[i])`,
   * numbered on from `seq`, all with `flags`: as many `addRange` calls.
   */
  addSpan(
    block: Uint8Array,
    starts: Int32Array,
    ends: Int32Array,
    from: number,
    to: number,
    seq: number,
    flags: number,
  ) {
    if (to <= from) return
    const ints = this.ensure(to - from)
    const seqs = this.seqs as Float64Array
    const at = this.count
    if (at === 0 || seq < this.firstSeq) this.firstSeq = seq
    const packed = flags | this.blockBitsOf(block)
    const line = at - from
    let bytes = 0
    for (let i = from; i < to; i++) {
      const start = starts[i] as number
      const end = ends[i] as number
      const column = (line + i) * INTS
      ints[column] = start
      ints[column + 1] = end
      ints[column + 2] = packed
      seqs[line + i] = seq + i - from
      bytes += end - start
    }
    this.count = at + to - from
    this.bytes += bytes
    if ((flags & LINE_WAKE) !== 0) this.wakes += to - from
    this.array = undefined
  }

  /** Line `i` has a byte that may break it into rows (LINE_MAY_BREAK). */
  markMayBreak(i: number): void {
    const ints = this.ints as Int32Array
    ints[i * INTS + 2] = (ints[i * INTS + 2] as number) | LINE_MAY_BREAK
  }

  /** The flags column's bits above the flags for a line of `block` (its index, added once per run). */
  private blockBitsOf(block: Uint8Array): number {
    if (block !== this.lastBlock) {
      this.lastBlock = block
      this.blockBits = (this.blocks.push(block) - 1) << BLOCK_SHIFT
    }
    return this.blockBits
  }

  /** A line that is already an object: it is the one handed out for it. */
  addLine(line: MonitorLine): void {
    const at = this.count
    this.addRange(line.source, line.blockStart, line.blockStart + line.byteLength, line.seq, flagsOf(line))
    this.madeLines ??= []
    this.madeLines[at] = line
  }

  seq(i: number): number {
    return (this.seqs as Float64Array)[i] as number
  }

  private packed(i: number): number {
    return (this.ints as Int32Array)[i * INTS + 2] as number
  }

  private flags(i: number): number {
    return this.packed(i) & FLAGS_MASK
  }

  matched(i: number): boolean {
    return (this.flags(i) & LINE_MATCHED) !== 0
  }

  block(i: number): Uint8Array {
    return this.blocks[this.packed(i) >>> BLOCK_SHIFT] as Uint8Array
  }

  start(i: number): number {
    return (this.ints as Int32Array)[i * INTS] as number
  }

  end(i: number): number {
    return (this.ints as Int32Array)[i * INTS + 1] as number
  }

  /** Line `i` if it was made an object already. */
  made(i: number): MonitorLine | undefined {
    return this.madeLines?.[i]
  }

  /** Line `i` as an object, made on first use. */
  line(i: number): MonitorLine {
    const made = this.madeLines?.[i]
    if (made) return made
    const line = recordedLine(this.block(i), this.start(i), this.end(i), this.seq(i), this.flags(i))
    this.madeLines ??= []
    this.madeLines[i] = line
    return line
  }

  /** Every line as an object, in order (the same array each time). */
  toArray(): MonitorLine[] {
    if (this.array) return this.array
    const lines = new Array<MonitorLine>(this.length)
    for (let i = 0; i < lines.length; i++) lines[i] = this.line(i)
    this.array = lines
    return lines
  }
}

/** The object for a recorded line (whether it may break is known: LINE_MAY_BREAK). */
export const recordedLine = (block: Uint8Array, start: number, end: number, seq: number, flags: number) =>
  lineOf(block, start, end, seq, flags, (flags & LINE_MAY_BREAK) !== 0 ? 2 : 1)

/**
 * A batch the batcher made: its `lines` are made from its records when first read. Its lines are a
 * getter, so a spread copy of it has none: `fieldsOf` says so where a copy takes other lines.
 */
export class RecordedBatch implements OutputBatch {
  readonly #records: BatchLines

  constructor(
    readonly monitorId: string,
    readonly batchSeq: number,
    readonly stillRunning: boolean,
    readonly status: OutputBatch["status"],
    readonly dropped: OutputBatch["dropped"],
    records: BatchLines,
  ) {
    this.#records = records
  }

  get lines(): MonitorLine[] {
    return this.#records.toArray()
  }

  get records(): BatchLines {
    return this.#records
  }
}

/** A batch's fields but its lines (its `lines` are not made for it). */
export function fieldsOf(batch: OutputBatch): Omit<OutputBatch, "lines"> {
  // Key by key: a destructuring that names `lines` would read it, and so make them.
  const fields: Record<string, unknown> = {}
  for (const key of Object.keys(batch)) if (key !== "lines") fields[key] = batch[key as keyof OutputBatch]
  return fields as Omit<OutputBatch, "lines">
}

/** A batch's lines, read without making objects where the batcher recorded them. */
export function linesOf(batch: OutputBatch): BatchLines {
  return batch instanceof RecordedBatch ? batch.records : BatchLines.of(batch.lines)
}
