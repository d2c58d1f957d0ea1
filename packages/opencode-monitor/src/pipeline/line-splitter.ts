const NEWLINE = 10
const CARRIAGE_RETURN = 13

// Below this line length the next newline is sought byte by byte: for `yes`, an indexOf call per line costs more.
const SHORT_LINE = 16

/** A line is `block[start, end)`: no copy per line; the block belongs to the splitter's caller. */
export type EmitLine = (block: Uint8Array, start: number, end: number, truncated: boolean) => void

/**
 * Splits bytes into lines of at most `maxBytes`, so a UTF-8 character split across chunks is whole before
 * anyone decodes it. An over-long line is cut at a character boundary, marked truncated, its rest dropped
 * and counted. A line within one chunk is a range of it; one assembled from several gets its own block.
 */
export class LineSplitter {
  private parts: Uint8Array[] = []
  private partialLength = 0
  private discarding = false

  constructor(
    private readonly maxBytes: number,
    private readonly emit: EmitLine,
    private readonly countDropped: (bytes: number) => void,
  ) {}

  push(chunk: Uint8Array): void {
    let start = 0
    let short = false
    const length = chunk.length
    const search = searchView(chunk)
    while (start < length) {
      let newline: number
      if (short) {
        // The previous line was short: scan a few bytes before paying for a native call.
        const limit = Math.min(start + SHORT_LINE, length)
        let at = start
        while (at < limit && chunk[at] !== NEWLINE) at++
        newline = at < limit ? at : limit === length ? -1 : search.indexOf(NEWLINE, limit)
      } else {
        newline = search.indexOf(NEWLINE, start)
      }
      if (newline === -1) {
        this.appendPartial(chunk.subarray(start))
        return
      }
      if (this.discarding) {
        this.countDropped(newline - start)
        this.discarding = false
      } else if (this.partialLength === 0 && newline - start <= this.maxBytes) {
        this.emit(chunk, start, newline, false)
      } else if (this.partialLength === 0) {
        this.cutInChunk(chunk, start, newline)
      } else {
        this.appendPartial(chunk.subarray(start, newline))
        if (this.discarding) this.discarding = false
        else this.emitPartial()
      }
      short = newline - start < SHORT_LINE
      start = newline + 1
    }
  }

  /** Emits a last line that had no newline at the end. */
  end(): void {
    if (this.partialLength > 0) this.emitPartial()
    this.discarding = false
  }

  private appendPartial(piece: Uint8Array): void {
    if (piece.length === 0) return
    if (this.discarding) {
      this.countDropped(piece.length)
      return
    }
    this.parts.push(copyOf(piece))
    this.partialLength += piece.length
    if (this.partialLength > this.maxBytes) this.shrinkPartial()
  }

  /** An over-long line whole in `chunk`: what shrinkPartial would keep, as a range of the chunk (no copy). */
  private cutInChunk(chunk: Uint8Array, start: number, newline: number): void {
    const lastCr = chunk.lastIndexOf(CARRIAGE_RETURN, newline - 2)
    const from = lastCr >= start ? lastCr + 1 : start
    if (newline - from <= this.maxBytes) {
      this.emit(chunk, from, newline, false)
      return
    }
    const cut = characterBoundary(chunk, from, from + this.maxBytes) - from
    this.countDropped(newline - from - cut)
    this.emit(chunk, from, from + cut, true)
  }

  private shrinkPartial(): void {
    let bytes = this.joinPartial()
    // A progress bar redrawn with \r and no \n would grow forever; only its last frame matters.
    const lastCr = bytes.subarray(0, bytes.length - 1).lastIndexOf(CARRIAGE_RETURN)
    if (lastCr !== -1) bytes = copyOf(bytes, lastCr + 1)
    if (bytes.length <= this.maxBytes) {
      this.parts = [bytes]
      this.partialLength = bytes.length
      return
    }
    const cut = characterBoundary(bytes, 0, this.maxBytes)
    this.countDropped(bytes.length - cut)
    this.parts = []
    this.partialLength = 0
    this.discarding = true
    // A copy of the kept part: the dropped rest of a long partial line must not stay pinned by it.
    this.emit(copyOf(bytes, 0, cut), 0, cut, true)
  }

  private emitPartial(): void {
    const bytes = this.joinPartial()
    this.parts = []
    this.partialLength = 0
    this.emit(bytes, 0, bytes.length, false)
  }

  private joinPartial(): Uint8Array {
    if (this.parts.length === 1) return this.parts[0] as Uint8Array
    const joined = new Uint8Array(this.partialLength)
    let offset = 0
    for (const part of this.parts) {
      joined.set(part, offset)
      offset += part.length
    }
    return joined
  }
}

/** `chunk` as a plain Uint8Array: its indexOf costs less per call than a Buffer's (a call per line of a flood). */
function searchView(chunk: Uint8Array): Uint8Array {
  return Buffer.isBuffer(chunk) ? new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length) : chunk
}

/** `bytes[start, end)` in a buffer of its own: a view of a pipe's read would keep the whole read alive. */
const copyOf = (bytes: Uint8Array, start = 0, end = bytes.length): Uint8Array =>
  new Uint8Array(bytes.subarray(start, end))

/** The nearest cut at or before `at` that does not split a UTF-8 sequence (never before `start`). */
export function characterBoundary(bytes: Uint8Array, start: number, at: number): number {
  let cut = at
  // Back off while the byte at the cut is a continuation byte (10xxxxxx).
  while (cut > start && ((bytes[cut] as number) & 0xc0) === 0x80) cut--
  return cut
}
