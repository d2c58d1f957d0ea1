import type { Readable } from "node:stream"
import { realScheduler, type Scheduler, type TimerHandle } from "../scheduler"

// Pipelines run on the server's event loop, and a fast printer keeps 'data' coming (Bun hands over up to 512 KB):
// all pipes share one CPU slice per turn, in pieces. Past it a pipe is paused until the next turn, and the full
// pipe blocks the writer in the kernel: memory stays bounded and no byte is lost.
const SLICE_BUDGET_MS = 4
const PIECE_BYTES = 32 * 1024
// Lines per piece at most (sampled at its start): 32 KB of `yes` is 16 384 lines, tens of ms before the JIT warms.
const PIECE_LINES = 4_096
const SAMPLE_BYTES = 256
const NEWLINE = 10
// A pipe paused for its share is resumed once this much processing is due: two slices' worth.
const RESUME_MS = 2 * SLICE_BUDGET_MS

let sliceOpen = false
let sliceStart = 0
let nextTurn: (() => void)[] = []

function sliceLeft(): boolean {
  if (!sliceOpen) {
    sliceOpen = true
    sliceStart = performance.now()
    setImmediate(endSlice)
  }
  return performance.now() - sliceStart < SLICE_BUDGET_MS
}

function endSlice(): void {
  sliceOpen = false
  const resumes = nextTurn
  nextTurn = []
  for (const resume of resumes) resume()
}

/**
 * `output_cpu_share`: a bucket of processing milliseconds for one plugin instance's pipes, refilled at `share`
 * ms per ms, holding a second's worth. A printer over it waits on pipe backpressure, so a runaway `yes` costs a
 * quarter of a core by default, while a burst (a test report) goes through at once.
 */
export class ReadShare {
  private tokens: number
  private refilledAt: number
  private waiting: (() => void)[] = []
  private timer: TimerHandle | undefined

  constructor(
    private readonly share: number,
    private readonly deps: { scheduler: Scheduler; clock: () => number } = {
      scheduler: realScheduler,
      clock: () => performance.now(),
    },
  ) {
    this.tokens = this.capacity
    this.refilledAt = deps.clock()
  }

  private get capacity(): number {
    return 1_000 * this.share
  }

  hasRoom(): boolean {
    const now = this.deps.clock()
    this.tokens = Math.min(this.capacity, this.tokens + (now - this.refilledAt) * this.share)
    this.refilledAt = now
    return this.tokens > 0
  }

  /** Runs `work` and charges the time it took. */
  spend(work: () => void): void {
    const start = this.deps.clock()
    try {
      work()
    } finally {
      this.tokens -= this.deps.clock() - start
    }
  }

  /**
   * Calls `resume` once the bucket holds RESUME_MS (one timer for all waiting pipes): a wake costs work the
   * bucket never sees, so a capped flood is woken a few dozen times a second, not once per piece.
   */
  whenRoom(resume: () => void): void {
    this.waiting.push(resume)
    if (this.timer !== undefined) return
    const wanted = Math.min(RESUME_MS, this.capacity) - this.tokens
    this.timer = this.deps.scheduler.setTimeout(
      () => {
        this.timer = undefined
        const resumes = this.waiting
        this.waiting = []
        for (const go of resumes) go()
      },
      Math.max(1, Math.ceil(wanted / this.share)),
    )
  }
}

/** Where the piece from `offset` ends: after its last newline in its second half, so lines seldom straddle pieces. */
function pieceEnd(chunk: Uint8Array, offset: number): number {
  const size = pieceSize(chunk, offset)
  const end = offset + size
  if (end >= chunk.length) return chunk.length
  const newline = chunk.lastIndexOf(NEWLINE, end - 1)
  return newline >= end - size / 2 ? newline + 1 : end
}

/** PIECE_BYTES, or fewer where the sample at `offset` has lines so short that they would be over PIECE_LINES. */
function pieceSize(chunk: Uint8Array, offset: number): number {
  const sampleEnd = Math.min(chunk.length, offset + SAMPLE_BYTES)
  let lines = 0
  for (let at = offset; at < sampleEnd; at++) if (chunk[at] === NEWLINE) lines++
  return lines === 0 ? PIECE_BYTES : Math.min(PIECE_BYTES, Math.floor((PIECE_LINES * SAMPLE_BYTES) / lines))
}

/** Feeds `stream` to `onChunk` under the shared slice and the instance's `share`; resolves after EOF or close. */
export function readPipe(stream: Readable, onChunk: (chunk: Uint8Array) => void, share?: ReadShare): Promise<void> {
  const { promise, resolve } = Promise.withResolvers<void>()
  const queue: Uint8Array[] = []
  let offset = 0
  let paused = false
  let ended = false
  // Nothing more is read until `until` calls back.
  function wait(until: (resume: () => void) => void) {
    if (!paused) stream.pause()
    paused = true
    until(drain)
  }
  function drain() {
    for (let chunk = queue[0]; chunk; chunk = queue[0]) {
      if (!sliceLeft()) return wait((resume) => nextTurn.push(resume))
      if (share && !share.hasRoom()) return wait((resume) => share.whenRoom(resume))
      const end = pieceEnd(chunk, offset)
      const piece = offset === 0 && end === chunk.length ? chunk : chunk.subarray(offset, end)
      if (share) share.spend(() => onChunk(piece))
      else onChunk(piece)
      offset = end
      if (end === chunk.length) {
        queue.shift()
        offset = 0
      }
    }
    if (paused) {
      paused = false
      if (!ended) stream.resume()
    }
    // It ends more than once (`end`, then `close`): resolving again does nothing.
    if (ended) resolve()
  }
  const end = () => {
    ended = true
    if (!paused) drain()
  }
  stream.on("data", (chunk: Uint8Array) => {
    queue.push(chunk)
    if (!paused) drain()
  })
  stream.once("end", end)
  stream.once("close", end)
  stream.once("error", end)
  return promise
}
