import { describe, expect, test } from "bun:test"
import { defaultMonitorConfig, type MonitorConfig } from "../src/config"
import { formatMonitorBatch } from "../src/delivery/envelope"
import type { OutputBatch } from "../src/pipeline/batcher"
import { compileLineFilter } from "../src/pipeline/filter"
import { lineByteLength, lineText } from "../src/pipeline/line"
import { createMonitorPipeline } from "../src/pipeline/pipeline"
import { FakeScheduler } from "./support/fake-scheduler"

// Bytes in, OutputBatch out, through the real splitter, filter, ring and batcher: every promise the
// envelope makes to the model is checked where the components meet, not only on each component.

const bytes = (text: string) => new TextEncoder().encode(text)

async function pipelineWith(overrides: Partial<MonitorConfig> = {}, pattern?: string) {
  const config = { ...defaultMonitorConfig(), ...overrides }
  const scheduler = new FakeScheduler()
  const batches: OutputBatch[] = []
  const filter = await compileLineFilter(pattern, config.pattern_max_length)
  const pipeline = createMonitorPipeline({
    monitorId: "mon_p",
    config,
    filter,
    scheduler,
    onBatch: (b) => batches.push(b),
  })
  return { config, scheduler, batches, pipeline }
}

const envelopeOf = (batch: OutputBatch) => formatMonitorBatch({ batch, label: "job" })

describe("createMonitorPipeline keeps the envelope's promises", () => {
  test("an over-long line arrives marked [truncated] and its cut bytes are counted in dropped:", async () => {
    const { batches, pipeline } = await pipelineWith({ line_max_bytes: 256 })
    pipeline.push("stdout", bytes(`${"x".repeat(1000)}\nshort\n`))
    pipeline.finish({ kind: "exited", code: 0 })

    const lines = batches.flatMap((b) => b.lines)
    expect(lines.map((l) => [l.seq, l.truncated, lineByteLength(l)])).toEqual([
      [1, true, 256],
      [2, false, 5],
    ])
    const dropped = batches.reduce((sum, b) => sum + b.dropped.bytes, 0)
    expect(dropped).toBe(1000 - 256)
    const text = batches.map(envelopeOf).join("\n")
    expect(text).toContain(`[stdout seq=1] ${"x".repeat(256)} [truncated]`)
    expect(text).toContain("[stdout seq=2] short\n")
    expect(text).toContain(`dropped: 0 matched, 0 unmatched (${1000 - 256} bytes)`)
  })

  test("a truncated line split across many chunks is still marked and counted once", async () => {
    const { batches, pipeline } = await pipelineWith({ line_max_bytes: 256 })
    for (let i = 0; i < 10; i++) pipeline.push("stderr", bytes("y".repeat(100)))
    pipeline.push("stderr", bytes("\nnext\n"))
    pipeline.finish({ kind: "exited", code: 1 })
    const lines = batches.flatMap((b) => b.lines)
    expect(lines.map((l) => [l.stream, l.truncated, lineText(l).length])).toEqual([
      ["stderr", true, 256],
      ["stderr", false, 4],
    ])
    expect(batches.reduce((sum, b) => sum + b.dropped.bytes, 0)).toBe(1000 - 256)
  })

  test("unmatched lines pushed out of the ring are counted as dropped unmatched, with their bytes", async () => {
    const { batches, pipeline, scheduler, config } = await pipelineWith({ ring_max_lines: 4 }, "ERR")
    // Four unmatched lines fill the ring; three more push three of them out.
    for (let i = 1; i <= 7; i++) pipeline.push("stdout", bytes(`noise ${i}\n`))
    pipeline.push("stdout", bytes("ERR one\n"))
    scheduler.advance(config.flush_interval_ms)

    expect(batches).toHaveLength(1)
    const batch = batches[0] as OutputBatch
    expect(batch.lines.map((l) => lineText(l))).toEqual(["ERR one"])
    // noise 1..4 were evicted (the ring holds noise 5, 6, 7 and the matched line).
    expect(batch.dropped).toEqual({ matched: 0, unmatched: 4, bytes: 4 * "noise n".length })
    expect(envelopeOf(batch)).toContain(`dropped: 0 matched, 4 unmatched (${4 * 7} bytes)`)
  })

  test("matched lines leaving the ring are not counted as dropped: they were already handed to delivery", async () => {
    const { batches, pipeline } = await pipelineWith({ ring_max_lines: 2 }, "ERR")
    for (let i = 1; i <= 5; i++) pipeline.push("stdout", bytes(`ERR ${i}\n`))
    pipeline.finish({ kind: "exited", code: 0 })
    expect(batches.flatMap((b) => b.lines.map((l) => lineText(l)))).toEqual([
      "ERR 1",
      "ERR 2",
      "ERR 3",
      "ERR 4",
      "ERR 5",
    ])
    expect(batches.map((b) => b.dropped)).toEqual(batches.map(() => ({ matched: 0, unmatched: 0, bytes: 0 })))
  })

  test("a \\r-redrawn progress line arrives as its final state", async () => {
    const { batches, pipeline } = await pipelineWith()
    pipeline.push("stdout", bytes("progress 10%\rprogress 55%\r"))
    pipeline.push("stdout", bytes("progress 100%\r\ndone\n"))
    pipeline.finish({ kind: "exited", code: 0 })
    expect(batches.flatMap((b) => b.lines.map((l) => lineText(l)))).toEqual(["progress 100%", "done"])
    expect(batches.map(envelopeOf).join("\n")).not.toContain("10%")
  })

  test("seq is continuous across stdout and stderr, in arrival order, with no gaps", async () => {
    const { batches, pipeline } = await pipelineWith({ batch_max_lines: 3 })
    pipeline.push("stdout", bytes("o1\no2\n"))
    pipeline.push("stderr", bytes("e1\n"))
    pipeline.push("stdout", bytes("o3"))
    pipeline.push("stderr", bytes("e2\ne3\n"))
    pipeline.endStream("stdout")
    pipeline.finish({ kind: "exited", code: 0 })
    const lines = batches.flatMap((b) => b.lines)
    expect(lines.map((l) => `${l.seq}:${l.stream}:${lineText(l)}`)).toEqual([
      "1:stdout:o1",
      "2:stdout:o2",
      "3:stderr:e1",
      "4:stderr:e2",
      "5:stderr:e3",
      "6:stdout:o3",
    ])
    expect(batches.map((b) => b.batchSeq)).toEqual(batches.map((_, i) => i + 1))
  })

  test("the terminal batch carries the drops not yet reported, even with no lines of its own", async () => {
    const { batches, pipeline, scheduler, config } = await pipelineWith({ ring_max_lines: 2 }, "ERR")
    pipeline.push("stdout", bytes("ERR first\n"))
    scheduler.advance(config.flush_interval_ms)
    expect(batches).toHaveLength(1)
    // After the last streaming batch: three unmatched lines, one of which leaves the ring.
    pipeline.push("stdout", bytes("a\nb\nc\n"))
    pipeline.finish({ kind: "exited", code: 3 })

    expect(batches).toHaveLength(2)
    const terminal = batches[1] as OutputBatch
    expect(terminal.stillRunning).toBe(false)
    expect(terminal.lines).toEqual([])
    // The ring (2 lines) held "ERR first" and then a; b pushed out "ERR first" (matched, already
    // delivered), c pushed out a (unmatched, never delivered).
    expect(terminal.dropped).toEqual({ matched: 0, unmatched: 1, bytes: 1 })
    const text = envelopeOf(terminal)
    expect(text).toContain("Status: exited (code=3)\ndropped: 0 matched, 1 unmatched (1 bytes)\n")
  })

  test("the terminal batch includes a last line that had no newline", async () => {
    const { batches, pipeline } = await pipelineWith()
    pipeline.push("stdout", bytes("tail without newline"))
    pipeline.finish({ kind: "signaled", signal: "SIGTERM" })
    const terminal = batches.at(-1) as OutputBatch
    expect(terminal.stillRunning).toBe(false)
    expect(terminal.lines.map((l) => lineText(l))).toEqual(["tail without newline"])
    expect(envelopeOf(terminal)).toContain("[stdout seq=1] tail without newline\n\nStatus: exited (signal=SIGTERM)")
  })
})
