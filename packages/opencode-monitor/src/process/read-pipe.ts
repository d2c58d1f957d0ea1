import type { Readable } from "node:stream"

// Every monitor's pipeline runs on the opencode server's event loop. A child that prints faster
// than we consume would keep 'data' callbacks coming back to back (and Bun hands over up to
// 512 KB at once), so all pipes share one CPU slice per event-loop turn and chunks are processed
// in pieces. Past the budget a pipe is paused until the next turn: nothing more is read, the pipe
// fills, and the kernel blocks the writer. Memory stays bounded and no byte is lost.
const SLICE_BUDGET_MS = 4
const PIECE_BYTES = 32 * 1024
const NEWLINE = 10

let sliceOpen = false
let sliceStart = 0
let waiting: PipeReader[] = []

function budgetLeft(): boolean {
  if (!sliceOpen) {
    sliceOpen = true
    sliceStart = performance.now()
    setImmediate(endSlice)
  }
  return performance.now() - sliceStart < SLICE_BUDGET_MS
}

function endSlice(): void {
  sliceOpen = false
  const readers = waiting
  waiting = []
  for (const reader of readers) reader.drain()
}

class PipeReader {
  private readonly queue: Uint8Array[] = []
  private offset = 0
  private paused = false
  private ended = false

  constructor(
    private readonly stream: Readable,
    private readonly onChunk: (chunk: Uint8Array) => void,
    private readonly resolve: () => void,
  ) {}

  push(chunk: Uint8Array): void {
    this.queue.push(chunk)
    if (!this.paused) this.drain()
  }

  end(): void {
    this.ended = true
    if (!this.paused) this.drain()
  }

  drain(): void {
    for (;;) {
      const chunk = this.queue[0]
      if (!chunk) break
      if (!budgetLeft()) {
        if (!this.paused) this.stream.pause()
        this.paused = true
        waiting.push(this)
        return
      }
      const end = pieceEnd(chunk, this.offset)
      this.onChunk(this.offset === 0 && end === chunk.length ? chunk : chunk.subarray(this.offset, end))
      this.offset = end
      if (end === chunk.length) {
        this.queue.shift()
        this.offset = 0
      }
    }
    if (this.paused) {
      this.paused = false
      if (!this.ended) this.stream.resume()
    }
    if (this.ended) this.resolve()
  }
}

/**
 * Where the piece of `chunk` from `offset` ends: PIECE_BYTES on, or just after the last newline in
 * its second half, so that a line seldom straddles two pieces (one that does is put together from
 * copies of its parts).
 */
function pieceEnd(chunk: Uint8Array, offset: number): number {
  const end = offset + PIECE_BYTES
  if (end >= chunk.length) return chunk.length
  const newline = chunk.lastIndexOf(NEWLINE, end - 1)
  return newline >= end - PIECE_BYTES / 2 ? newline + 1 : end
}

/** Feeds every byte of `stream` to `onChunk` under the shared budget; resolves after EOF or close. */
export function readPipe(stream: Readable, onChunk: (chunk: Uint8Array) => void): Promise<void> {
  return new Promise((resolve) => {
    let settled = false
    const reader = new PipeReader(stream, onChunk, () => {
      if (!settled) {
        settled = true
        resolve()
      }
    })
    stream.on("data", (chunk: Uint8Array) => reader.push(chunk))
    stream.once("end", () => reader.end())
    stream.once("close", () => reader.end())
    stream.once("error", () => reader.end())
  })
}
