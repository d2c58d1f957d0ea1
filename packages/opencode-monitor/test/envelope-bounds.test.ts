import { describe, expect, test } from "bun:test"
import { defaultMonitorConfig } from "../src/config"
import { coalesceWaiting } from "../src/delivery/coalesce"
import { formatMonitorBatch } from "../src/delivery/envelope"
import type { Delivery } from "../src/delivery/session-queue"
import type { OutputBatch } from "../src/pipeline/batcher"
import { createMonitorPipeline } from "../src/pipeline/pipeline"
import { renderLine } from "../src/pipeline/render"
import { FakeScheduler } from "./support/fake-scheduler"

// What an envelope holds is bounded by what it is sent as, whatever bytes a command prints: every
// size the plugin counts (batch_max_bytes, the coalescing bound) is the size of the rows sent.

/** The UTF-8 bytes of a batch's rows, as the envelope writes them. */
const rowBytes = (batch: OutputBatch): number =>
  batch.lines.reduce(
    (sum, line) => sum + renderLine(line).rows.reduce((n, row) => n + Buffer.byteLength(row) + 1, 0),
    0,
  )

function run(chunks: Uint8Array[], overrides: Partial<ReturnType<typeof defaultMonitorConfig>> = {}) {
  const scheduler = new FakeScheduler()
  const batches: OutputBatch[] = []
  const pipeline = createMonitorPipeline({
    monitorId: "mon_b",
    config: { ...defaultMonitorConfig(), ...overrides },
    filter: undefined,
    scheduler,
    onBatch: (b) => batches.push(b),
  })
  for (const chunk of chunks) pipeline.push("stdout", chunk)
  pipeline.finish({ kind: "exited", code: 0 })
  return batches
}

describe("envelope sizes for any bytes", () => {
  test("a Latin-1 log: 40 lines of 300 × 0xE9 stay within batch_max_bytes, sized exactly", () => {
    const line = Buffer.concat([Buffer.alloc(300, 0xe9), Buffer.from("\n")])
    const batches = run([Buffer.concat(Array.from({ length: 40 }, () => line))])
    expect(batches.flatMap((b) => b.lines)).toHaveLength(40)
    for (const batch of batches) {
      expect(rowBytes(batch)).toBeLessThanOrEqual(16_384)
      // Each 0xE9 becomes a 3-byte U+FFFD: the size counted is the size sent.
      expect(batch.bytes).toBe(rowBytes(batch))
      expect(Buffer.byteLength(formatMonitorBatch({ batch, label: "latin1" }))).toBeLessThan(16_384 + 1_024)
    }
    expect(batches.length).toBeGreaterThan(1)
  })

  test("one line whose text outgrows a whole envelope is cut to fit, marked, and the cut counted", () => {
    const batches = run([Buffer.concat([Buffer.alloc(8_000, 0xe9), Buffer.from("\n")])], { batch_max_bytes: 4_096 })
    const [line] = batches.flatMap((b) => b.lines)
    expect(line?.truncated).toBe(true)
    const batch = batches.find((b) => b.lines.length > 0) as OutputBatch
    expect(rowBytes(batch)).toBeLessThanOrEqual(4_096)
    expect(batch.bytes).toBe(rowBytes(batch))
    const dropped = batches.reduce((sum, b) => sum + b.dropped.bytes, 0)
    expect(dropped).toBe(8_000 - ((line?.end ?? 0) - (line?.start ?? 0)))
  })

  test("random bytes (invalid UTF-8, controls, visual breaks, colour): no batch's rows exceed batch_max_bytes, and its counted size is never less", () => {
    let seed = 11
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
      return seed / 2 ** 31
    }
    const pieces = [
      [0xe9],
      [0x0b],
      [0x0c],
      [0xc2, 0x85],
      [0xe2, 0x80, 0xa8],
      [0x1b, 0x5b, 0x33, 0x31, 0x6d],
      [0x0d],
      [0x00],
    ]
    const bytes: number[] = []
    for (let i = 0; i < 200_000; i++) {
      const r = random()
      if (r < 0.02) bytes.push(10)
      else if (r < 0.1) bytes.push(...(pieces[Math.floor(random() * pieces.length)] as number[]))
      else bytes.push(0x61 + Math.floor(random() * 26))
    }
    const all = Uint8Array.from(bytes)
    const chunks: Uint8Array[] = []
    for (let at = 0; at < all.length; at += 7_919) chunks.push(all.subarray(at, at + 7_919))
    const batches = run(chunks, { batch_max_bytes: 2_048, line_max_bytes: 4_096 })
    expect(batches.flatMap((b) => b.lines).length).toBeGreaterThan(1_000)
    for (const batch of batches) {
      expect(rowBytes(batch)).toBeLessThanOrEqual(2_048)
      expect(batch.bytes).toBeGreaterThanOrEqual(rowBytes(batch))
    }
  })

  test("waiting Latin-1 output is coalesced by the bytes it would be sent as", () => {
    const line = Buffer.concat([Buffer.alloc(300, 0xe9), Buffer.from("\n")])
    const batches = run([Buffer.concat(Array.from({ length: 200 }, () => line))]).filter((b) => b.stillRunning)
    const deliveries = batches.map((batch) => ({ batch, attempts: 0, dropped: batch.dropped }) as unknown as Delivery)
    const kept = coalesceWaiting(deliveries, "mon_b", { maxLines: 100, maxBytes: 2 * 16_384 })
    const sent = kept.reduce((sum, d) => sum + rowBytes(d.batch), 0)
    // What waits is within the bound as sent, apart from the newest batch, which always stays.
    expect(sent - rowBytes((kept.at(-1) as Delivery).batch)).toBeLessThanOrEqual(2 * 16_384)
    expect(kept.length).toBeLessThan(deliveries.length)
  })
})
