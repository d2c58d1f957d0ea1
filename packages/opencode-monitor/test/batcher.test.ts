import { describe, expect, test } from "bun:test"
import { MonitorBatcher, NO_DROPS, type OutputBatch } from "../src/pipeline/batcher"
import { fieldsOf, linesOf } from "../src/pipeline/batch-lines"
import { MonitorLine } from "../src/pipeline/line"
import { LINE_MATCHED, LINE_STDERR } from "../src/pipeline/ring-buffer"
import { FakeScheduler } from "./support/fake-scheduler"

const line = (seq: number, text = `line ${seq}`) =>
  new MonitorLine(seq, "stdout", new TextEncoder().encode(text), false, true)

/** A batch of two lines recorded as ranges, fields read and copied but its lines never. */
function setupBatchOfRanges(): OutputBatch {
  const { batches, batcher } = setup({ maxLines: 2, maxBytes: 1024, intervalMs: 1000 })
  const block = new TextEncoder().encode("a\nb\n")
  batcher.addRange(block, 0, 1, 1, LINE_MATCHED, 14, true)
  batcher.addRange(block, 2, 3, 2, LINE_MATCHED, 14, true)
  const batch = batches[0] as OutputBatch
  fieldsOf(batch)
  void { ...fieldsOf(batch), lines: [] }
  return batch
}

function setup(limits = { maxLines: 3, maxBytes: 1024, intervalMs: 1000 }) {
  const scheduler = new FakeScheduler()
  const batches: OutputBatch[] = []
  const batcher = new MonitorBatcher("mon_1", limits, (b) => batches.push(b), { scheduler })
  return { scheduler, batches, batcher }
}

describe("MonitorBatcher", () => {
  test("a batch's records stay whole past the room taken at first, whatever other batches do", () => {
    // 3000 batches: most of 1 to 7 lines with room for just those, every 1000th of 1200 lines (more
    // than the 512 a batch takes room for at once); some added a line at a time, some a span at a
    // time. Each keeps every line's block, range, flags and seq, however many batches were made since.
    const blocks = [new TextEncoder().encode("xab\ncd\n"), new TextEncoder().encode("xyefgh\n")]
    const starts = Int32Array.from({ length: 1200 }, (_, i) => 1 + (i % 2) * 3)
    const ends = Int32Array.from({ length: 1200 }, (_, i) => 1 + (i % 2) * 3 + 2)
    const made: { records: ReturnType<typeof linesOf>; lines: number; seq: number; one: boolean }[] = []
    for (let b = 0; b < 3000; b++) {
      const lines = b % 1000 === 0 ? 1200 : 1 + (b % 7)
      const one = b % 3 !== 1
      const { batches, batcher } = setup({
        maxLines: lines === 1200 ? 100_000 : lines,
        maxBytes: 1 << 30,
        intervalMs: 1000,
      })
      const seq = 1 + b * 10_000
      if (one) {
        for (let i = 0; i < lines; i++)
          batcher.addRange(blocks[i % 2] as Uint8Array, 1 + (i % 2), 3, seq + i, LINE_MATCHED, 1, true)
      } else {
        const breaking = { at: new Int32Array(0), bounds: new Int32Array(0), count: 0, next: 0 }
        batcher.addSpan(blocks[0] as Uint8Array, starts, ends, 0, lines, seq, LINE_MATCHED, 1, breaking)
      }
      batcher.flushNow()
      made.push({ records: linesOf(batches[0] as OutputBatch), lines, seq, one })
    }
    for (const { records, lines, seq, one } of made) {
      expect(records.length).toBe(lines)
      for (let i = 0; i < lines; i++) {
        const got: unknown[] = [records.seq(i), records.block(i), records.start(i), records.end(i), records.matched(i)]
        const want: unknown[] = one
          ? [seq + i, blocks[i % 2], 1 + (i % 2), 3, true]
          : [seq + i, blocks[0], 1 + (i % 2) * 3, 3 + (i % 2) * 3, true]
        if (got.some((value, k) => value !== want[k])) expect(got).toEqual(want)
      }
    }
  })

  test("a batch of lines recorded as ranges makes each line once, the same object for every reader", () => {
    const { batches, batcher } = setup()
    const block = new TextEncoder().encode("one\ntwo\nthree\n")
    batcher.addRange(block, 0, 3, 1, LINE_MATCHED, 16, true)
    batcher.addRange(block, 4, 7, 2, LINE_MATCHED | LINE_STDERR, 16, true)
    batcher.add(line(3, "made"))
    const [batch] = batches as [OutputBatch]
    const records = linesOf(batch)
    expect([records.length, records.bytes, records.firstSeq]).toEqual([3, 10, 1])
    expect(records.made(0)).toBeUndefined()
    expect(records.made(2)?.text).toBe("made")
    const lines = batch.lines
    expect(lines.map((l) => [l.seq, l.stream, l.text, l.matched])).toEqual([
      [1, "stdout", "one", true],
      [2, "stderr", "two", true],
      [3, "stdout", "made", true],
    ])
    expect(batch.lines).toBe(lines)
    expect(records.line(1)).toBe(lines[1] as MonitorLine)
    // A copy that takes other lines keeps every other field, and does not make the lines.
    const again = linesOf(setupBatchOfRanges())
    const copy = fieldsOf(batches[0] as OutputBatch)
    expect(copy).toEqual({
      monitorId: "mon_1",
      batchSeq: 1,
      stillRunning: true,
      status: { kind: "running" },
      dropped: NO_DROPS,
    })
    expect(again.made(0)).toBeUndefined()
  })

  test("flushes when a batch reaches batch_max_lines", () => {
    const { batches, batcher } = setup()
    for (let seq = 1; seq <= 7; seq++) batcher.add(line(seq))
    expect(batches.map((b) => b.lines.map((l) => l.seq))).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ])
  })

  test("flushes on batch_max_bytes counted in UTF-8 bytes, not characters", () => {
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
