import { describe, expect, test } from "bun:test"
import { PassThrough } from "node:stream"
import { ReadShare, readPipe } from "../src/process/read-pipe"
import { FakeScheduler } from "./support/fake-scheduler"

describe("readPipe", () => {
  test("hands a read over in pieces of at most 32 KB that end after a newline near their end, losing no byte", async () => {
    // Reads of 200 KB: lines of 1 to 300 bytes, now and then one of 40 KB (no newline in a whole piece).
    let seed = 7
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
      return seed / 2 ** 31
    }
    const parts: string[] = []
    let size = 0
    while (size < 1_000_000) {
      const line = "x".repeat(random() < 0.01 ? 40_000 : 1 + Math.floor(random() * 300))
      parts.push(`${line}\n`)
      size += line.length + 1
    }
    const input = Buffer.from(parts.join(""))
    const stream = new PassThrough({ highWaterMark: 256 * 1024 })
    const pieces: Uint8Array[] = []
    const done = readPipe(stream, (piece) => pieces.push(Uint8Array.from(piece)))
    for (let at = 0; at < input.length; at += 200_000) stream.write(input.subarray(at, at + 200_000))
    stream.end()
    await done

    expect(Buffer.concat(pieces).equals(input)).toBe(true)
    expect(Math.max(...pieces.map((piece) => piece.length))).toBeLessThanOrEqual(32 * 1024)
    // A piece ends just after a newline, at the end of a read (every 200 000 bytes here), or at
    // 32 KB when the second half of those had no newline.
    let at = 0
    for (const piece of pieces) {
      at += piece.length
      if (piece.at(-1) === 10 || at % 200_000 === 0 || at === input.length) continue
      expect([piece.length, piece.subarray(16 * 1024).includes(10)]).toEqual([32 * 1024, false])
    }
    expect(pieces.filter((piece) => piece.length < 32 * 1024 && piece.at(-1) === 10).length).toBeGreaterThan(10)
  })

  test("a flood of 2-byte lines is handed over in pieces of at most 4 096 lines (the pipeline's work is per line)", async () => {
    const input = Buffer.from("y\n".repeat(256 * 1024))
    const stream = new PassThrough({ highWaterMark: 512 * 1024 })
    const pieces: Uint8Array[] = []
    const done = readPipe(stream, (piece) => pieces.push(Uint8Array.from(piece)))
    stream.end(input)
    await done
    expect(Buffer.concat(pieces).equals(input)).toBe(true)
    const lines = (piece: Uint8Array) => piece.filter((byte) => byte === 10).length
    expect(Math.max(...pieces.map(lines))).toBeLessThanOrEqual(4_096)
  })

  test("past the slice budget the stream is paused, so a fast writer meets backpressure; every byte arrives in order", async () => {
    // 1 MB of numbered lines, written in 16 KB pieces by a writer that waits for 'drain' when told to.
    const input = Buffer.from(
      Array.from({ length: 100_000 }, (_, i) => `line ${i}\n`)
        .join("")
        .slice(0, 1024 * 1024),
    )
    const stream = new PassThrough({ highWaterMark: 16 * 1024 })
    const pieces: Uint8Array[] = []
    let written = 0
    let delivered = 0
    let maxBacklog = 0
    const done = readPipe(stream, (piece) => {
      pieces.push(Uint8Array.from(piece))
      delivered += piece.length
      // Slower than the plugin can process: each piece takes longer than the whole slice budget.
      const until = performance.now() + 5
      while (performance.now() < until) {}
    })
    let refused = 0
    for (let at = 0; at < input.length; at += 16 * 1024) {
      const ok = stream.write(input.subarray(at, at + 16 * 1024))
      written += Math.min(16 * 1024, input.length - at)
      maxBacklog = Math.max(maxBacklog, written - delivered)
      if (!ok) {
        refused++
        await new Promise((resolve) => stream.once("drain", resolve))
      }
    }
    stream.end()
    await done

    expect(Buffer.concat(pieces).equals(input)).toBe(true)
    // The writer was held back: what it wrote ahead of what was processed stayed within the
    // stream's buffers (a few pieces), never the whole megabyte.
    expect(refused).toBeGreaterThan(10)
    expect(maxBacklog).toBeLessThanOrEqual(128 * 1024)
  })
})

describe("ReadShare: the share of a core reading output may take", () => {
  /** A clock and timers the test moves: `work` advances the clock as processing would. */
  function clocked(share: number) {
    const scheduler = new FakeScheduler()
    const readShare = new ReadShare(share, { scheduler, clock: () => scheduler.now() })
    const work = (ms: number) => readShare.spend(() => scheduler.advance(ms))
    return { scheduler, readShare, work }
  }

  test("a burst of a second's worth goes at once; past it, processing waits for the refill", () => {
    const { readShare, work } = clocked(0.25)
    expect(readShare.hasRoom()).toBe(true)
    for (let i = 0; i < 4; i++) work(60)
    // 240 ms of work in 240 ms: the 250 ms bucket refilled 60 ms meanwhile, so there is room.
    expect(readShare.hasRoom()).toBe(true)
    work(100)
    expect(readShare.hasRoom()).toBe(false)
  })

  test("an idle minute banks no more than a second's worth: a flood after it waits past the burst", () => {
    const { scheduler, readShare, work } = clocked(0.25)
    scheduler.advance(60_000)
    expect(readShare.hasRoom()).toBe(true)
    // 400 ms of work from a full 250 ms bucket that refills 100 ms meanwhile: 50 ms short.
    work(400)
    expect(readShare.hasRoom()).toBe(false)
  })

  test("over a long flood, processing gets its share of wall time and no more", () => {
    const { worked, now } = capFlood(5, 60_000)
    // A quarter of the time, plus the first second's burst and at most one piece over.
    expect(worked).toBeGreaterThanOrEqual(0.25 * 60_000)
    expect(worked).toBeLessThanOrEqual(0.25 * now + 250 + 5)
  })

  test("a capped flood of cheap pieces is woken a few dozen times a second, not once per piece", () => {
    // Each wake costs the server stream and timer work the share does not see: pieces of 0.3 ms
    // (4 096 lines of `yes`) must not each wait for a wake of their own.
    const { worked, now, wakesAfterFirstSecond } = capFlood(0.3, 11_000)
    expect(wakesAfterFirstSecond / 10).toBeLessThanOrEqual(40)
    // Still its share: a quarter of the time, plus the first second's burst and a piece over.
    expect(worked).toBeGreaterThanOrEqual(0.25 * 11_000)
    expect(worked).toBeLessThanOrEqual(0.25 * now + 250 + 0.3)
  })

  test("past the share a real pipe is paused, so the writer waits on backpressure; every byte arrives", async () => {
    // Virtual time: each piece costs 10 ms of work, and a wait for the share moves the clock on.
    let now = 0
    const scheduler = {
      now: () => now,
      setTimeout: (callback: () => void, ms: number) => {
        setImmediate(() => {
          now += ms
          callback()
        })
        return { id: 0 }
      },
      clearTimeout: () => {},
    }
    const readShare = new ReadShare(0.1, { scheduler, clock: () => now })
    const stream = new PassThrough({ highWaterMark: 16 * 1024 })
    const input = Buffer.from("x\n".repeat(512 * 1024))
    let delivered = 0
    let worked = 0
    const done = readPipe(
      stream,
      (piece) => {
        delivered += piece.length
        now += 10
        worked += 10
      },
      readShare,
    )
    let refused = 0
    let maxBacklog = 0
    for (let at = 0; at < input.length; at += 16 * 1024) {
      maxBacklog = Math.max(maxBacklog, at - delivered)
      if (!stream.write(input.subarray(at, at + 16 * 1024))) {
        refused++
        await new Promise((resolve) => stream.once("drain", resolve))
      }
    }
    stream.end()
    await done
    expect(delivered).toBe(input.length)
    expect(refused).toBeGreaterThan(10)
    expect(maxBacklog).toBeLessThanOrEqual(128 * 1024)
    // The work took at most its share of the time, past the first second's burst.
    expect(worked).toBeLessThanOrEqual(0.1 * now + 100 + 10)
    expect(worked).toBeGreaterThan(200)
  })
})

/**
 * A flood of pieces of `pieceMs` work each under a 0.25 share until `untilMs` of virtual time: time
 * moves only by the work done and by the waits the share asks for.
 */
function capFlood(pieceMs: number, untilMs: number): { worked: number; now: number; wakesAfterFirstSecond: number } {
  let now = 0
  let wake: { callback: () => void; ms: number } | undefined
  const scheduler = {
    now: () => now,
    setTimeout: (callback: () => void, ms: number) => {
      wake = { callback, ms }
      return { id: 1 }
    },
    clearTimeout: () => {},
  }
  const readShare = new ReadShare(0.25, { scheduler, clock: () => now })
  let worked = 0
  let wakesAfterFirstSecond = 0
  const go = () => {
    while (readShare.hasRoom()) {
      readShare.spend(() => {
        now += pieceMs
      })
      worked += pieceMs
    }
    readShare.whenRoom(go)
  }
  go()
  while (now < untilMs) {
    const due = wake as { callback: () => void; ms: number }
    wake = undefined
    now += due.ms
    if (now > 1_000) wakesAfterFirstSecond++
    due.callback()
  }
  return { worked, now, wakesAfterFirstSecond }
}
