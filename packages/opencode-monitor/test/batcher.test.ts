import { describe, expect, test } from "bun:test"
import { MonitorBatcher, type OutputBatch } from "../src/pipeline/batcher"
import { FakeScheduler } from "./support/fake-scheduler"
import { sizedLine } from "./support/lines"

const line = (seq: number, text = `line ${seq}`) => sizedLine(seq, "stdout", text)

function setup(limits = { maxLines: 3, maxBytes: 1024, intervalMs: 1000 }) {
  const scheduler = new FakeScheduler()
  const batches: OutputBatch[] = []
  const batcher = new MonitorBatcher("mon_1", limits, (b) => batches.push(b), { scheduler })
  return { scheduler, batches, batcher }
}

describe("MonitorBatcher", () => {
  test("a batch is plain data: a spread copy keeps its lines, and its bytes are its lines' sizes", () => {
    const { batches, batcher } = setup({ maxLines: 2, maxBytes: 1024, intervalMs: 1000 })
    batcher.add(line(1))
    batcher.add(line(2))
    const copy = { ...(batches[0] as OutputBatch) }
    expect(copy.lines.map((l) => l.seq)).toEqual([1, 2])
    expect(copy.bytes).toBe(copy.lines.reduce((sum, l) => sum + l.size, 0))
    expect(copy.bytes).toBe(Buffer.byteLength(copy.lines.map((l) => `[stdout seq=${l.seq}] line ${l.seq}\n`).join("")))
  })

  test("flushes when a batch reaches batch_max_lines", () => {
    const { batches, batcher } = setup()
    for (let seq = 1; seq <= 7; seq++) batcher.add(line(seq))
    expect(batches.map((b) => b.lines.map((l) => l.seq))).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ])
  })

  test("flushes on batch_max_bytes counted in the envelope's UTF-8 bytes, not characters", () => {
    const { batches, batcher } = setup({ maxLines: 100, maxBytes: 1024, intervalMs: 1000 })
    // 200 characters of 3 bytes each: two lines exceed 1024 bytes although they are 400 characters.
    batcher.add(line(1, "世".repeat(200)))
    expect(batches).toHaveLength(0)
    batcher.add(line(2, "世".repeat(200)))
    expect(batches).toHaveLength(1)
    expect(batches[0]?.lines.map((l) => l.seq)).toEqual([1])
  })

  test("flushes flush_interval_ms after the first line of a batch", () => {
    const { scheduler, batches, batcher } = setup()
    batcher.add(line(1))
    scheduler.advance(999)
    expect(batches).toHaveLength(0)
    scheduler.advance(1)
    expect(batches.map((b) => b.lines.length)).toEqual([1])
    expect(scheduler.pendingTimers).toBe(0)
  })

  // The seed's regression test: "terminal batch is produced even when the buffer is already drained".
  describe("terminal batch is produced even when the buffer is already drained", () => {
    test("an empty buffer stays silent by default", () => {
      const { batches, batcher } = setup()
      batcher.flushNow()
      expect(batches).toHaveLength(0)
    })

    test("allowEmpty emits a zero-line batch", () => {
      const { batches, batcher } = setup()
      batcher.flushNow({ allowEmpty: true })
      expect(batches).toHaveLength(1)
      expect(batches[0]?.lines).toHaveLength(0)
      expect(batches[0]?.batchSeq).toBe(1)
    })

    test("allowEmpty after a drained buffer keeps batchSeq monotonic", () => {
      const { batches, batcher } = setup()
      batcher.add(line(1))
      batcher.flushNow()
      batcher.flushNow({ allowEmpty: true })
      expect(batches.map((b) => b.batchSeq)).toEqual([1, 2])
    })
  })

  test("a flush with a status is the one terminal batch and closes the batcher", () => {
    const { batches, batcher } = setup()
    batcher.add(line(1))
    batcher.flushNow({ allowEmpty: true, status: { kind: "exited", code: 7 } })
    batcher.add(line(2))
    batcher.flushNow({ allowEmpty: true })
    expect(batches).toHaveLength(1)
    expect(batches[0]?.stillRunning).toBe(false)
    expect(batches[0]?.status).toEqual({ kind: "exited", code: 7 })
  })
})

describe("MonitorBatcher interval timer", () => {
  test("a batch that starts late in the armed timer's period still waits its full interval", () => {
    const { scheduler, batches, batcher } = setup({ maxLines: 2, maxBytes: 1024, intervalMs: 1000 })
    batcher.add(line(1))
    scheduler.advance(600)
    batcher.add(line(2)) // fills the batch: flushed at once, the timer stays armed
    batcher.add(line(3)) // a new batch starts at t=600
    scheduler.advance(400) // t=1000: the armed timer fires, but batch 3 is only 400 ms old
    expect(batches.map((b) => b.lines.map((l) => l.seq))).toEqual([[1, 2]])
    scheduler.advance(599)
    expect(batches).toHaveLength(1)
    scheduler.advance(1)
    expect(batches.map((b) => b.lines.map((l) => l.seq))).toEqual([[1, 2], [3]])
    expect(scheduler.pendingTimers).toBe(0)
  })

  test("a flood arms at most one timer at a time", () => {
    const { scheduler, batcher } = setup({ maxLines: 2, maxBytes: 1024, intervalMs: 1000 })
    for (let seq = 1; seq <= 1000; seq++) batcher.add(line(seq))
    expect(scheduler.pendingTimers).toBe(1)
  })
})
