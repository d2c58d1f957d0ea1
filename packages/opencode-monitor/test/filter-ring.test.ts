import { describe, expect, test } from "bun:test"
import { RE2JS } from "re2js"
import { defaultMonitorConfig } from "../src/config"
import { compileLineFilter, type LineFilter, PatternError } from "../src/pipeline/filter"
import { lineByteLength, lineText, type MonitorLine } from "../src/pipeline/line"
import { createMonitorPipeline } from "../src/pipeline/pipeline"
import { MonitorRingBuffer } from "../src/pipeline/ring-buffer"
import { FakeScheduler } from "./support/fake-scheduler"
import { sizedLine } from "./support/lines"

const line = (seq: number, matched = true, text = `line ${seq}`) =>
  sizedLine(seq, seq % 2 ? "stdout" : "stderr", text, { matched })

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
    expect(ring.unreported).toEqual({ lines: 1, bytes: lineByteLength(line(1)) })
  })

  // A pipe's read is a Buffer (whose slice() is a view, not a copy); a test's is a Uint8Array.
  test.each([
    ["Uint8Array", (buffer: ArrayBuffer) => new Uint8Array(buffer, 100, 13)],
    ["Buffer", (buffer: ArrayBuffer) => Buffer.from(buffer, 100, 13)],
  ])("the lines of a small read (%s) keep a copy of just their bytes, not the read's large buffer", (_, view) => {
    const ring = new MonitorRingBuffer(4)
    // A pipe's small read is a view of a 64 KB buffer.
    const buffer = new ArrayBuffer(64 * 1024)
    const read = view(buffer)
    read.set(new TextEncoder().encode("first\nsecond\n"))
    const kept: MonitorLine[] = [
      {
        seq: 1,
        stream: "stdout",
        block: read,
        start: 0,
        end: 5,
        truncated: false,
        matched: true,
        wake: false,
        size: 0,
      },
      {
        seq: 2,
        stream: "stdout",
        block: read,
        start: 6,
        end: 12,
        truncated: false,
        matched: true,
        wake: false,
        size: 0,
      },
    ]
    for (const l of kept) ring.push(l)
    ring.release(buffer, 1)
    expect(kept.map((l) => l.block.buffer.byteLength)).toEqual([12, 12])
    expect(kept.map((l) => new TextDecoder().decode(l.block.subarray(l.start, l.end)))).toEqual(["first", "second"])
    // A read that fills most of its buffer is kept as it is: no copy of a flood's reads.
    const whole = new TextEncoder().encode("abc\n")
    const third: MonitorLine = { ...sizedLine(3, "stdout", "abc"), block: whole, start: 0, end: 3 }
    ring.push(third)
    ring.release(whole.buffer, 3)
    expect(third.block).toBe(whole)
  })

  test("the pipeline judges a read's pieces together, and releases a read once the next one comes or it ends", () => {
    const pipeline = createMonitorPipeline({
      monitorId: "mon_r",
      config: defaultMonitorConfig(),
      filter: undefined,
      scheduler: new FakeScheduler(),
      onBatch: () => {},
    })
    // A 64 KB read of 99-byte lines, split in 8 KB pieces (as readPipe does): each piece alone is
    // less than half of the buffer, their lines together more, so the read is kept, not copied.
    const flood = Buffer.alloc(64 * 1024, `${"x".repeat(98)}\n`)
    for (let at = 0; at < flood.length; at += 8 * 1024) pipeline.push("stdout", flood.subarray(at, at + 8 * 1024))
    // A small read, a view of another 64 KB buffer, comes next: the flood's lines keep their read.
    const small = Buffer.from(new ArrayBuffer(64 * 1024), 0, 6)
    small.write("\ntail\n")
    pipeline.push("stdout", small)
    const held = () => pipeline.ring.latest(1_000).map((l) => l.block.buffer)
    // The lines whole in a piece keep the flood's read (those across two pieces were put together).
    expect(held().filter((b) => b === flood.buffer).length).toBeGreaterThan(600)
    expect(held().filter((b) => b === small.buffer)).toHaveLength(1)
    // Its end releases the small read: its lines hold a copy of their bytes, not the 64 KB buffer.
    pipeline.finish({ kind: "exited", code: 0 })
    const [last] = pipeline.ring.latest(1)
    expect(last && lineText(last)).toBe("tail")
    expect(last?.block.buffer.byteLength).toBe(4)
    expect(held().filter((b) => b === flood.buffer).length).toBeGreaterThan(600)
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

describe("word patterns judged on a line's bytes", () => {
  // Plain pieces (ASCII, and UTF-8 that sanitizing keeps), and now and then a piece whose bytes and
  // sanitized text differ in one of the ways sanitizing knows: colour and 8-bit sequences, CR
  // frames, C0/C1 controls, visual breaks, zero-width, bidi and tag characters, a BOM, invalid and
  // cut UTF-8; most of them hide a word from the bytes, or show one the text does not have.
  const PLAIN = [
    "error",
    "warn",
    "FAIL",
    "err",
    "or",
    "wa",
    "rn",
    "ok ",
    "x ",
    " ",
    "\t",
    "é",
    "日本",
    "ошибка",
    "✓",
    "➜",
    "─",
  ]
  PLAIN.push(...PLAIN.map(() => "\n"))
  const TOUCHED = [
    "err\x1b[0mor",
    "er\u200bror",
    "wa\x00rn",
    "w\x7farn",
    "err\u0085or",
    "er\u0080ror",
    "warn\rok",
    "\x1b]0;error\x07ok",
    "er\u{e0041}ror",
    "wa\u202ern",
    "e\u009b31mrror",
    "er\ufeffror",
    "er\u061cror",
    "er\u180eror",
    "wa\u2028rn",
    "er\u2060ror",
    "wa\ufffarn",
    "\x1b[31m",
    "\x1b[1;34mwa\x1b[0mrn",
    "\x1b[38;5;208mFAIL\x1b[m",
    "er\x1b[;mror",
    "err\x1b[31",
    "\x1b[?25lwarn",
    "wa\x1b[38:5:1mrn",
    "er\x00[0mror",
    "wa\x1b[1m\x1b[0mrn",
    "\x1b[32m✓\x1b[39m",
  ]
  const PIECES = [...PLAIN, ...TOUCHED].map((piece) => Buffer.from(piece))
  const RAW = [[0xff], [0xe2, 0x80], [0x85], [0xc2], [0xf3, 0xa0]].map((bytes) => Buffer.from(bytes))

  function stream(seed: number): Buffer {
    let state = seed
    const random = () => {
      state = (state * 1_103_515_245 + 12_345) % 2 ** 31
      return state / 2 ** 31
    }
    const parts: Buffer[] = []
    for (let i = 0; i < 40_000; i++) {
      const r = random()
      const [pool, from] = r < 0.02 ? [RAW, 0] : r < 0.12 ? [PIECES, PLAIN.length] : [PIECES, 0]
      const to = pool === RAW ? RAW.length : r < 0.12 ? PIECES.length : PLAIN.length
      parts.push(pool[from + Math.floor(random() * (to - from))] as Buffer)
    }
    return Buffer.concat(parts)
  }

  /**
   * Every line the ring holds, with its flags, after `bytes` went through in reads cut at random
   * (an odd seed cuts lines at 24 bytes: such a line ends before its newline, maybe within a word).
   */
  function judged(bytes: Buffer, filter: LineFilter, wakeFilter: LineFilter | undefined, seed: number) {
    const pipeline = createMonitorPipeline({
      monitorId: "mon_w",
      config: { ...defaultMonitorConfig(), ring_max_lines: 100_000, line_max_bytes: seed % 2 ? 24 : 1_024 },
      filter,
      wakeFilter,
      scheduler: new FakeScheduler(),
      onBatch: () => {},
    })
    for (let at = 0, cut = seed; at < bytes.length; at += cut) {
      cut = 1 + ((cut * 7_919 + 13) % 3_000)
      pipeline.push("stdout", bytes.subarray(at, at + cut))
    }
    pipeline.finish({ kind: "exited", code: 0 })
    return pipeline.ring.latest(100_000)
  }

  test("every line gets the answer the pattern gives on its sanitized text", async () => {
    const cases: [string, string | undefined][] = [
      ["error|warn", "FAIL"],
      ["error|warn|FAIL", undefined],
      ["error|warn", "warn$"],
      ["rror|ok  ", "or wa"],
    ]
    for (const [seed, [pattern, wakePattern]] of cases.entries()) {
      const filter = (await compileLineFilter(pattern, 512)) as LineFilter
      const wakeFilter = await compileLineFilter(wakePattern, 512, "wake_pattern")
      const lines = judged(stream(seed + 1), filter, wakeFilter, seed + 5)
      expect(lines.length).toBeGreaterThan(1_000)
      const answers = lines.map((line) => [line.seq, line.matched, line.wake])
      const onText = lines.map((line) => {
        const text = lineText(line)
        return [line.seq, filter(text), wakeFilter?.(text) ?? false]
      })
      expect(answers).toEqual(onText)
      // Each case has lines of both answers, and lines the words are found in only after sanitizing.
      expect(new Set(answers.map(([, matched]) => matched))).toEqual(new Set([true, false]))
      const words = pattern.split("|")
      const hidden = lines.filter((line) => {
        const raw = Buffer.from(line.block.subarray(line.start, line.end)).toString("latin1")
        return line.matched && !words.some((word) => raw.includes(word))
      })
      expect(hidden.length).toBeGreaterThan(0)
    }
  })
})
