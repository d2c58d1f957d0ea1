import { describe, expect, test } from "bun:test"
import { RE2JS } from "re2js"
import { compileLineFilter, PatternError } from "../src/pipeline/filter"
import { MonitorLine } from "../src/pipeline/line"
import { LINE_MATCHED, LINE_STDERR, LINE_TRUNCATED, LINE_WAKE, MonitorRingBuffer } from "../src/pipeline/ring-buffer"

const line = (seq: number, matched = true, text = `line ${seq}`) =>
  new MonitorLine(seq, seq % 2 ? "stdout" : "stderr", new TextEncoder().encode(text), false, matched)

describe("match_pattern filter", () => {
  test("no pattern matches every line", async () => {
    expect(await compileLineFilter(undefined, 512)).toBeUndefined()
    expect(await compileLineFilter("", 512)).toBeUndefined()
  })

  test("a pattern matches anywhere in the line", async () => {
    const filter = await compileLineFilter("error|FAIL", 512)
    expect(filter?.("build error: x")).toBe(true)
    expect(filter?.("ok")).toBe(false)
  })

  test("plain words joined by | answer exactly as RE2 does", async () => {
    const texts = ["", "error", "an Error", "warnings: 3", "FAIL!", "fail", "x|y", "foo bar"]
    for (const pattern of ["error|warn|FAIL", "error", "foo bar|baz"]) {
      const fast = await compileLineFilter(pattern, 512)
      const re2 = RE2JS.compile(pattern)
      for (const text of texts) expect([pattern, text, fast?.(text)]).toEqual([pattern, text, re2.test(text)])
    }
  })

  test("an invalid pattern is rejected with the reason", async () => {
    await expect(compileLineFilter("(unclosed", 512)).rejects.toThrow(
      /not a valid RE2 regular expression: .*missing closing \)/,
    )
  })

  test("lookaround and backreferences are refused, not silently changed", async () => {
    await expect(compileLineFilter("(?=x)", 512)).rejects.toThrow(PatternError)
    await expect(compileLineFilter("(a)\\1", 512)).rejects.toThrow(/invalid escape/)
  })

  test("an over-long pattern is rejected naming the limit", async () => {
    await expect(compileLineFilter("a".repeat(513), 512)).rejects.toThrow(
      /513 characters long; the limit is 512 \(pattern_max_length\)/,
    )
  })

  test("catastrophic-backtracking patterns compile and answer correctly (RE2 has no backtracking)", async () => {
    const long = "a".repeat(8192)
    expect((await compileLineFilter("(a|a)*b", 512))?.(long)).toBe(false)
    expect((await compileLineFilter("^(a?){25}a{25}$", 512))?.("a".repeat(25))).toBe(true)
    expect((await compileLineFilter(".*.*.*x", 512))?.(`${long}x`)).toBe(true)
  })
})

describe("MonitorRingBuffer", () => {
  test("is bounded and counts what it pushes out", async () => {
    const ring = new MonitorRingBuffer(3)
    for (let seq = 1; seq <= 5; seq++) ring.push(line(seq, seq !== 2))
    expect(ring.length).toBe(3)
    expect(ring.query({ limit: 10 }).map((l) => l.seq)).toEqual([3, 4, 5])
    expect(ring.counters).toEqual({
      total: 5,
      matched: 4,
      unmatched: 1,
      droppedMatched: 1,
      droppedUnmatched: 1,
      bytesDropped: 12,
      lastSeq: 5,
    })
  })

  test("an unmatched line pushed out is left for the next batch to report; a matched one is not", async () => {
    const ring = new MonitorRingBuffer(2)
    ring.push(line(1, false))
    ring.push(line(2))
    expect(ring.unreported).toEqual({ lines: 0, bytes: 0 })
    ring.push(line(3))
    ring.push(line(4))
    expect(ring.query({ limit: 10 }).map((l) => l.seq)).toEqual([3, 4])
    expect(ring.unreported).toEqual({ lines: 1, bytes: line(1).byteLength })
  })

  test("a line kept as bytes is made into a line once, when a query hands it out", async () => {
    const ring = new MonitorRingBuffer(4)
    const block = new TextEncoder().encode("first\nsecond\n")
    ring.pushRange(block, 0, 5, 1, LINE_MATCHED)
    ring.pushRange(block, 6, 12, 2, LINE_STDERR | LINE_TRUNCATED | LINE_WAKE)
    const [first, second] = ring.query({ limit: 10 })
    expect([first?.seq, first?.text, first?.stream, first?.matched, first?.truncated]).toEqual([
      1,
      "first",
      "stdout",
      true,
      false,
    ])
    expect([second?.seq, second?.text, second?.stream, second?.matched, second?.truncated, second?.wake]).toEqual([
      2,
      "second",
      "stderr",
      false,
      true,
      true,
    ])
    expect(ring.query({ limit: 10 })[1]).toBe(second as MonitorLine)
    expect(ring.counters).toMatchObject({ total: 2, matched: 1, unmatched: 1 })
  })

  test("queries by stream, since_sequence and a bounded limit", async () => {
    const ring = new MonitorRingBuffer(100)
    for (let seq = 1; seq <= 10; seq++) ring.push(line(seq, seq % 3 === 0))
    expect(ring.query({ stream: "matched", limit: 10 }).map((l) => l.seq)).toEqual([3, 6, 9])
    expect(ring.query({ stream: "unmatched", sinceSequence: 6, limit: 10 }).map((l) => l.seq)).toEqual([7, 8, 10])
    expect(ring.query({ stream: "all", sinceSequence: 2, limit: 3 }).map((l) => l.seq)).toEqual([3, 4, 5])
  })

  test("counters stay current at every push", async () => {
    const ring = new MonitorRingBuffer(1)
    ring.push(line(7, false))
    expect(ring.counters.lastSeq).toBe(7)
    ring.countDroppedBytes(5)
    expect(ring.counters.bytesDropped).toBe(5)
  })
})
