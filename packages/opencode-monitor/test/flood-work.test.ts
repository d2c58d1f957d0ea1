import { describe, expect, test } from "bun:test"
import { defaultMonitorConfig, type MonitorConfig } from "../src/config"
import { formatMonitorBatch } from "../src/delivery/envelope"
import { MonitorBatcher, type OutputBatch } from "../src/pipeline/batcher"
import { isErrorLooking, ObservationBudget } from "../src/delivery/budget"
import { fieldsOf, linesOf } from "../src/pipeline/batch-lines"
import { colourEnd, compileLineFilter, type LineFilter, RawCaselessWords, RawWordMatcher } from "../src/pipeline/filter"
import { fallbackStripAnsi, hasBreakByte, MonitorLine } from "../src/pipeline/line"
import { envelopeBytes, envelopeBytesBound } from "../src/pipeline/render"
import { createMonitorPipeline, RELEASE_DELAY_MS } from "../src/pipeline/pipeline"
import { FakeScheduler } from "./support/fake-scheduler"

// Issue 28: a line is decoded, sanitized and classified only where someone reads it; the shortcuts
// taken on raw bytes (word search, break bytes, size bounds, shared read blocks) must give exactly
// what the decoded path gives.

const enc = new TextEncoder()

/** Deterministic PRNG (mulberry32). */
function prng(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// Pieces a line is made of: words, and every byte that sanitizing treats specially, some of them
// inside a word ("er\x00ror" reads "error"; "error\rok" reads "ok"; an OSC title hides its payload).
const PIECES: (string | number[])[] = [
  "error",
  "warn",
  "FAIL",
  "ok",
  " request GET /api 200 ",
  "er\x00ror",
  "wa\x1b[31mrn",
  "\x1b[1;31merror\x1b[0m",
  "err\x1b[Kor",
  "\x1b[38;5;208mwarn\x1b[m",
  "\x1b[0error",
  "\x1b[12345mwarn",
  "\x1b[1;2;3;4;5;6;7;8;9mwa",
  "\x1b[?25l",
  "\x1b[2Jwa\x1b[Hrn",
  "\x1b[1",
  "\x1b]0;error\x07",
  "error\rdone",
  "done\rerror",
  "\r",
  "\t",
  "\v",
  "\f",
  "er\u200bror",
  "\u2028",
  "\u2029",
  "\u0085",
  "\u009b31m",
  "er\u0080ror",
  "\u009d0;warn\u0007",
  "\ufeff",
  "\u061c",
  "\u180e",
  "\u2066",
  "\ufff9",
  "→ ✓ é ü 日本 🚀",
  "\u00a0",
  "OMO MONITOR OUTPUT",
  [0xf3, 0xa0, 0x80, 0x81],
  [0xff],
  [0xe2, 0x80],
  [0xc2],
  [0x7f],
  [0x01],
]

function trickyStream(seed: number, lines: number): Uint8Array {
  const random = prng(seed)
  const parts: number[] = []
  for (let i = 0; i < lines; i++) {
    const count = Math.floor(random() * 6)
    for (let j = 0; j < count; j++) {
      const piece = PIECES[Math.floor(random() * PIECES.length)] as string | number[]
      parts.push(...(typeof piece === "string" ? enc.encode(piece) : piece))
    }
    // Now and then a line longer than line_max_bytes (256 below).
    if (random() < 0.02) parts.push(...enc.encode("x".repeat(200 + Math.floor(random() * 400))))
    parts.push(0x0a)
  }
  return Uint8Array.from(parts)
}

/** The filter with its words hidden: every line is decided on its decoded text. */
const onText = (filter: LineFilter | undefined) => filter && ((text: string) => filter(text))

async function run(
  stream: Uint8Array,
  chunkSizes: () => number,
  patterns: { match?: string; wake?: string },
  decode: boolean,
) {
  const config: MonitorConfig = {
    ...defaultMonitorConfig(),
    line_max_bytes: 256,
    batch_max_bytes: 1024,
    ring_max_lines: 300,
  }
  const scheduler = new FakeScheduler()
  const batches: OutputBatch[] = []
  const pipeline = createMonitorPipeline({
    monitorId: "mon_w",
    config,
    filter: (decode ? onText : (f: LineFilter | undefined) => f)(
      await compileLineFilter(patterns.match, config.pattern_max_length),
    ),
    wakeFilter: (decode ? onText : (f: LineFilter | undefined) => f)(
      await compileLineFilter(patterns.wake, config.pattern_max_length, "wake_pattern"),
    ),
    scheduler,
    onBatch: (batch) => batches.push(batch),
  })
  for (let at = 0; at < stream.length; ) {
    const size = chunkSizes()
    // Read blocks like the runtime hands them over: views into a larger buffer, at any offset.
    const backing = new Uint8Array(size + 64)
    const offset = 32 + (at % 7)
    backing.set(stream.subarray(at, at + size), offset)
    pipeline.push("stdout", backing.subarray(offset, offset + Math.min(size, stream.length - at)))
    at += size
  }
  pipeline.finish({ kind: "exited", code: 0 })
  return {
    envelopes: batches.map((batch) => formatMonitorBatch({ batch, label: "job" })),
    flags: batches.flatMap((batch) => batch.lines.map((line) => [line.seq, line.matched, line.wake])),
    ring: pipeline.ring
      .query({ limit: 1000 })
      .map((line) => [line.seq, line.text, line.matched, line.truncated, line.mayBreak]),
    breaks: pipeline.ring.query({ limit: 1000 }).map((line) => hasBreakByte(line.bytes, 0, line.byteLength)),
    counters: { ...pipeline.ring.counters },
  }
}

describe("line work only where a line is read (issue 28)", () => {
  for (const patterns of [{}, { match: "error|warn|FAIL" }, { wake: "error" }, { match: "warn", wake: "FAIL|ok" }]) {
    test(`envelopes, flags and the ring are what the decoded path gives (${JSON.stringify(patterns)})`, async () => {
      const stream = trickyStream(28, 3000)
      const sizes = prng(7)
      const chunks = Array.from({ length: stream.length }, () => 1 + Math.floor(sizes() * 8192))
      const replay = () => {
        let i = 0
        return () => chunks[i++] as number
      }
      // The same chunks twice: lines decided on raw bytes where that is safe, and every line
      // decided on its decoded text, the answer every shortcut must agree with.
      const fast = await run(stream, replay(), patterns, false)
      const decoded = await run(stream, replay(), patterns, true)
      expect(fast.ring.map((line) => line[4])).toEqual(fast.breaks)
      expect(decoded.ring.map((line) => line[4])).toEqual(decoded.breaks)
      expect(fast.counters).toEqual(decoded.counters)
      expect(fast.flags).toEqual(decoded.flags)
      expect(fast.ring).toEqual(decoded.ring)
      expect(fast.envelopes).toEqual(decoded.envelopes)
    })
  }

  // With no pattern a chunk's lines are gathered and taken by the ring and the batcher together
  // (PlainRun): a filter that takes every line on its text goes line by line, and must agree.
  for (const shape of [
    { ring: 40, lines: 50, bytes: 1024, tiny: false },
    { ring: 1000, lines: 50, bytes: 16_384, tiny: true },
    { ring: 7, lines: 3, bytes: 1024, tiny: true },
    { ring: 7, lines: 5000, bytes: 1024, tiny: true },
    { ring: 300, lines: 500, bytes: 2048, tiny: false },
  ]) {
    test(`no pattern: lines taken a chunk at a time give what line by line gives (${JSON.stringify(shape)})`, () => {
      // Tiny lines (a `yes` flood) mixed with tricky ones: breaks, over-long lines, seqs of 1 to 5 digits.
      const random = prng(shape.ring)
      const parts: Uint8Array[] = []
      for (let i = 0; i < 60; i++) {
        parts.push(
          shape.tiny && random() < 0.7 ? enc.encode("y\n".repeat(1 + Math.floor(random() * 600))) : trickyStream(i, 40),
        )
        // A progress bar longer than line_max_bytes whose last frame fits: a line of its own, no drop.
        if (i % 10 === 0) parts.push(enc.encode(`a\nb\n${"#".repeat(300)}\r50%\rdone\nc\n`))
      }
      const stream = Uint8Array.from(parts.flatMap((part) => [...part]))
      const sizes = prng(shape.lines)
      const chunks = Array.from({ length: stream.length }, () => 1 + Math.floor(sizes() * 6000))
      const config: MonitorConfig = {
        ...defaultMonitorConfig(),
        line_max_bytes: 256,
        ring_max_lines: shape.ring,
        batch_max_lines: shape.lines,
        batch_max_bytes: shape.bytes,
      }
      const replay = (filter: LineFilter | undefined) => {
        const scheduler = new FakeScheduler()
        const batches: OutputBatch[] = []
        const seen: unknown[] = []
        const pipeline = createMonitorPipeline({
          monitorId: "mon_p",
          config,
          filter,
          scheduler,
          onBatch: (batch) => batches.push(batch),
        })
        let at = 0
        for (let i = 0; at < stream.length; i++) {
          const size = chunks[i] as number
          pipeline.push(i % 3 === 2 ? "stderr" : "stdout", stream.slice(at, at + size))
          at += size
          // What monitor_output and monitor_list read between two reads of the pipe.
          seen.push(
            { ...pipeline.ring.counters },
            pipeline.ring.query({ limit: 5 }).map((line) => line.seq),
          )
          scheduler.advance(i % 5 === 0 ? 700 : 10)
        }
        pipeline.finish({ kind: "exited", code: 0 })
        return {
          envelopes: batches.map((batch) => formatMonitorBatch({ batch, label: "job" })),
          times: batches.map((batch) => batch.batchSeq),
          ring: pipeline.ring
            .query({ limit: 100_000 })
            .map((line) => [line.seq, line.stream, line.text, line.truncated]),
          counters: { ...pipeline.ring.counters },
          seen,
        }
      }
      const gathered = replay(undefined)
      const oneByOne = replay(() => true)
      expect(gathered.counters).toEqual(oneByOne.counters)
      expect(gathered.counters.total).toBeGreaterThan(2_000)
      expect(gathered.ring).toEqual(oneByOne.ring)
      expect(gathered.envelopes).toEqual(oneByOne.envelopes)
      expect(gathered.seen).toEqual(oneByOne.seen)
    })
  }

  test("a plain-words pattern decided on raw bytes answers as the filter on the text, or leaves it to the text", async () => {
    const filter = await compileLineFilter("error|warn", 512)
    const matcher = RawWordMatcher.for(filter)
    expect(matcher).toBeDefined()
    let decided = 0
    for (let i = 0; i < 4000; i++) {
      const block = trickyStream(1000 + i, 1)
      const end = block.length - 1
      matcher?.startBlock(block)
      const answer = matcher?.test(0, end)
      const text = new MonitorLine(1, "stdout", block.subarray(0, end), false, true).text
      if (answer !== undefined) {
        decided++
        expect([JSON.stringify(text), answer]).toEqual([JSON.stringify(text), filter?.(text) ?? true])
      }
    }
    // Most lines are decided without decoding.
    expect(decided).toBeGreaterThan(1000)
  })

  test("the budget's error-looking check on raw bytes answers as the check on the text, in any case", () => {
    const words = new RawCaselessWords(["error", "fail", "panic", "exception", "traceback"])
    const onText = /error|fail|panic|exception|traceback/i
    const random = prng(5)
    // Words in every case, split by colour sequences and other bytes sanitizing takes out.
    const cased = [
      "ERROR",
      "Error",
      "eRrOr",
      "FAIL",
      "Failed",
      "panic:",
      "NullPointerException",
      "TraceBack",
      "err",
      "Exc",
    ]
    let decided = 0
    let errorLooking = 0
    for (let i = 0; i < 4000; i++) {
      const base = trickyStream(5000 + i, 1)
      const word = enc.encode(cased[Math.floor(random() * cased.length)] as string)
      const at = Math.floor(random() * base.length)
      const block = Uint8Array.from([...base.subarray(0, at), ...word, ...base.subarray(at)])
      const end = block.length - 1
      const line = new MonitorLine(1, "stdout", block.subarray(0, end), false, true)
      const expected = onText.test(line.text)
      const answer = words.test(block, 0, end)
      if (answer !== undefined) {
        decided++
        expect([JSON.stringify(line.text), answer]).toEqual([JSON.stringify(line.text), expected])
      }
      expect([JSON.stringify(line.text), isErrorLooking(line)]).toEqual([JSON.stringify(line.text), expected])
      if (expected) errorLooking++
    }
    // Most lines are decided without decoding, both ways.
    expect(decided).toBeGreaterThan(1000)
    expect(errorLooking).toBeGreaterThan(500)
    expect(4000 - errorLooking).toBeGreaterThan(500)
  })

  test("coloured lines are decided on their bytes without the colour sequences, as the text decides them", async () => {
    const filter = await compileLineFilter("error|warn", 512)
    const matcher = RawWordMatcher.for(filter) as RawWordMatcher
    const random = prng(28)
    const colours = [
      "\x1b[31m",
      "\x1b[0m",
      "\x1b[m",
      "\x1b[1;34m",
      "\x1b[38;5;208m",
      "\x1b[K",
      "\x1b[2J",
      "\x1b[10;20H",
    ]
    const words = ["er", "ror", "error", "wa", "rn", "warn", "ok ", "→", " 日本 "]
    let decided = 0
    for (let i = 0; i < 3000; i++) {
      const text = colouredLine(random, colours, words, 6)
      const { answer, clean } = askRawAndText(matcher, text)
      if (answer !== undefined) decided++
      expect([text, answer ?? filter?.(clean)]).toEqual([text, filter?.(clean)])
    }
    // Lines with nothing but colour sequences to remove are all decided on their bytes.
    expect(decided).toBe(3000)
  })

  test("a word that may start inside a colour sequence is looked for in the text, not taken from the bytes", async () => {
    // Each word starts with a byte a colour sequence holds after its ESC (a digit, `;`, a final letter).
    const filter = await compileLineFilter("1mode|;2x|mk", 512)
    const matcher = RawWordMatcher.for(filter) as RawWordMatcher
    const random = prng(31)
    const colours = ["\x1b[31m", "\x1b[1;2m", "\x1b[m", "\x1b[2K", "\x1b[1;2H"]
    const pieces = ["1mode", "ode", "1m", ";2x", "2x", "x", "mk", "k", "m", "ok "]
    let matched = 0
    for (let i = 0; i < 3000; i++) {
      const text = colouredLine(random, colours, pieces, 5)
      const { answer, clean } = askRawAndText(matcher, text)
      const expected = filter?.(clean)
      if (expected) matched++
      expect([text, answer]).toEqual([text, expected])
    }
    expect(matched).toBeGreaterThan(300)
    expect(3000 - matched).toBeGreaterThan(300)
  })

  test("the error words are found across colour sequences, and not inside one, in any case", () => {
    const words = new RawCaselessWords(["error", "fail"])
    const cases: [string, boolean][] = [
      ["\x1b[2fail", false],
      ["x \x1b[2fFAIL", true],
      ["ER\x1b[0mRoR", true],
      ["er\x1b[0m ror", false],
      ["e\x1b[1mr\x1b[0mr\x1b[31mor", true],
      ["\x1b[1;5Hfa\x1b[mIl", true],
      ["\x1b[31mok\x1b[0m", false],
    ]
    for (const [text, expected] of cases) {
      const block = Buffer.from(text)
      expect([text, words.test(block, 0, block.length)]).toEqual([text, expected])
    }
  })

  test("a sequence taken as colour on raw bytes is removed whole by both ANSI strippers", () => {
    const random = prng(7)
    const finals = "mJKABCDGHf"
    for (let i = 0; i < 500; i++) {
      const groups = Array.from({ length: 1 + Math.floor(random() * 8) }, () =>
        String(Math.floor(random() * 10_000)).slice(0, Math.floor(random() * 5)),
      )
      const sequence = `\x1b[${groups.join(";")}${finals[Math.floor(random() * finals.length)]}`
      const bytes = Buffer.from(`a${sequence}b`)
      expect(colourEnd(bytes, 1, bytes.length)).toBe(bytes.length - 2)
      const runtime = (globalThis as { Bun?: { stripANSI?: (text: string) => string } }).Bun?.stripANSI
      expect([sequence, runtime?.(`a${sequence}b`) ?? "ab", fallbackStripAnsi(`a${sequence}b`)]).toEqual([
        sequence,
        "ab",
        "ab",
      ])
    }
    for (const other of ["\x1b[0e", "\x1b[12345m", "\x1b[1;2;3;4;5;6;7;8;9m", "\x1b[?25l", "\x1b]0;t\x07", "\x1b[1"]) {
      const bytes = Buffer.from(`a${other}b`)
      expect([other, colourEnd(bytes, 1, bytes.length)]).toEqual([other, -1])
    }
  })

  test("a line's raw-bytes answer is the same at any offset of a read buffer, and on its own", async () => {
    const filter = await compileLineFilter("error|warn", 512)
    const matcher = RawWordMatcher.for(filter) as RawWordMatcher
    const random = prng(12)
    let decided = 0
    for (let i = 0; i < 1500; i++) {
      // Lines of every length around the four- and eight-byte steps of the scan, some long.
      const base = trickyStream(9000 + i, 1 + Math.floor(random() * 3))
      const pieces = Array.from({ length: 1 + Math.floor(random() * 3) }, (_, k) => trickyStream(7000 + 3 * i + k, 1))
      const line = Uint8Array.from(pieces.flatMap((piece) => [...piece.subarray(0, piece.length - 1)]))
      const text = new MonitorLine(1, "stdout", line, false, true).text
      const answers: (boolean | undefined)[] = []
      for (let offset = 0; offset < 8; offset++) {
        // The line in a block of lines, read at `offset` of a larger buffer; the same line on its own.
        const backing = new Uint8Array(offset + base.length + 2 * line.length + 16)
        const block = backing.subarray(offset, offset + base.length + 2 * line.length + 2)
        block.set(base)
        block.set(line, base.length)
        block[base.length + line.length] = 0x0a
        block.set(line, base.length + line.length + 1)
        matcher.startBlock(block)
        const start = base.length
        answers.push(matcher.test(start, start + line.length))
        // On its own, between two lines of the block: with a word just past its end, which is not its.
        const alone = Buffer.from([...line, ...enc.encode("error warn")])
        answers.push(matcher.testAlone(alone, 0, line.length))
        // The block's next line is answered as before.
        answers.push(matcher.test(start + line.length + 1, start + 2 * line.length + 1))
      }
      const first = answers[0]
      expect([JSON.stringify(text), answers]).toEqual([JSON.stringify(text), answers.map(() => first)])
      if (first !== undefined) {
        decided++
        expect([JSON.stringify(text), first]).toEqual([JSON.stringify(text), filter?.(text) ?? true])
      }
    }
    expect(decided).toBeGreaterThan(200)
  })

  test("a line put together from several reads keeps whether it may break into rows", async () => {
    for (const filter of [undefined, () => true, await compileLineFilter("a|c", 512)]) {
      const batches: OutputBatch[] = []
      const pipeline = createMonitorPipeline({
        monitorId: "mon_x",
        config: defaultMonitorConfig(),
        filter,
        scheduler: new FakeScheduler(),
        onBatch: (batch) => batches.push(batch),
      })
      // U+2028 split inside its bytes; a vertical tab; a line without either; each across two reads.
      for (const part of [
        [0x61, 0xe2],
        [0x80, 0xa8, 0x62, 0x0a, 0x63],
        [0x0b, 0x0a, 0x61],
        [0x63, 0x0a],
      ])
        pipeline.push("stdout", Uint8Array.from(part))
      pipeline.finish({ kind: "exited", code: 0 })
      const delivered = batches.flatMap((batch) => batch.lines.map((line) => [line.seq, line.mayBreak]))
      const kept = pipeline.ring.query({ limit: 10 }).map((line) => [line.seq, line.mayBreak])
      const expected = [
        [1, true],
        [2, true],
        [3, false],
      ]
      expect([String(filter), delivered, kept]).toEqual([String(filter), expected, expected])
    }
  })

  test("a long range is searched for break bytes within its bounds only", () => {
    const random = prng(41)
    const loop = (bytes: Uint8Array, start: number, end: number) => {
      for (let i = start; i < end; i++) if ([0x0b, 0x0c, 0xc2, 0xe2].includes(bytes[i] as number)) return true
      return false
    }
    let found = 0
    for (let i = 0; i < 400; i++) {
      const length = 200 + Math.floor(random() * 2000)
      const backing = new Uint8Array(length + 40).fill(0x78)
      const offset = 1 + Math.floor(random() * 16)
      const bytes = backing.subarray(offset, offset + length + 20)
      const start = 1 + Math.floor(random() * 8)
      const end = start + length - Math.floor(random() * 8)
      // A break byte inside, at either edge, or just outside the range (before it in the buffer too).
      const at = [start, end - 1, start - 1, end, -1, start + Math.floor(random() * (end - start))][i % 6] as number
      if (at === -1) backing[offset - 1] = 0xe2
      else bytes[at] = [0x0b, 0x0c, 0xc2, 0xe2][i % 4] as number
      const expected = loop(bytes, start, end)
      if (expected) found++
      expect([i, hasBreakByte(bytes, start, end)]).toEqual([i, expected])
    }
    expect(found).toBeGreaterThan(150)
    expect(400 - found).toBeGreaterThan(100)
  })

  test("a pattern with a word that is not printable ASCII is always decided on the decoded text", async () => {
    expect(RawWordMatcher.for(await compileLineFilter("ошибка|error", 512))).toBeUndefined()
    expect(RawWordMatcher.for(await compileLineFilter("(\\w|\\d)+$", 512))).toBeUndefined()
  })

  test("batches sized with the cheap bound end exactly where measured batches end", () => {
    const random = prng(11)
    const lines = Array.from({ length: 2000 }, (_, i) => {
      const stream = trickyStream(5000 + i, 1)
      const body = stream.subarray(0, stream.length - 1)
      const long = random() < 0.1 ? enc.encode("y".repeat(Math.floor(random() * 900))) : new Uint8Array(0)
      const bytes = new Uint8Array(body.length + long.length)
      bytes.set(body)
      bytes.set(long, body.length)
      return new MonitorLine(i + 1, "stdout", bytes, random() < 0.1, true)
    })
    const batchesWith = (bound: boolean) => {
      const scheduler = new FakeScheduler()
      const out: number[][] = []
      const batcher = new MonitorBatcher(
        "mon_b",
        { maxLines: 50, maxBytes: 1024, intervalMs: 1000 },
        (batch) => out.push(batch.lines.map((line) => line.seq)),
        { scheduler, measure: envelopeBytes, ...(bound ? { bound: envelopeBytesBound } : {}) },
      )
      for (const line of lines) batcher.add(line)
      batcher.flushNow()
      return out
    }
    const measured = batchesWith(false)
    expect(measured.length).toBeGreaterThan(40)
    expect(batchesWith(true)).toEqual(measured)
    for (const line of lines) expect(envelopeBytesBound(line)).toBeGreaterThanOrEqual(envelopeBytes(line))
  })

  test("lines the ring keeps do not hold on to the large read buffer they came in", async () => {
    const scheduler = new FakeScheduler()
    const pipeline = createMonitorPipeline({
      monitorId: "mon_m",
      config: defaultMonitorConfig(),
      filter: undefined,
      scheduler,
      onBatch: () => {},
    })
    const buffer = new Uint8Array(1024 * 1024)
    const text = enc.encode("first line\nsecond line\n")
    buffer.set(text, 4096)
    pipeline.push("stdout", buffer.subarray(4096, 4096 + text.length))
    const kept = pipeline.ring.query({ limit: 10 })
    expect(kept.map((line) => line.text)).toEqual(["first line", "second line"])
    // Right after the read the lines are views (a flood's lines leave the ring before they are copied)...
    for (const line of kept) expect(line.bytes.buffer).toBe(buffer.buffer)
    scheduler.advance(RELEASE_DELAY_MS)
    // ...then the lines the ring kept point into one small copy of their bytes.
    expect(kept.map((line) => line.text)).toEqual(["first line", "second line"])
    expect(pipeline.ring.query({ limit: 10 }).map((line) => line.text)).toEqual(["first line", "second line"])
    for (const line of kept) expect(line.bytes.buffer.byteLength).toBe(text.length - 1)
  })

  test("a flood's lines that leave the ring soon after their read are never copied", async () => {
    const scheduler = new FakeScheduler()
    const config = { ...defaultMonitorConfig(), ring_max_lines: 100 }
    const pipeline = createMonitorPipeline({
      monitorId: "mon_m",
      config,
      filter: undefined,
      scheduler,
      onBatch: () => {},
    })
    const buffers: Uint8Array[] = []
    for (let b = 0; b < 4; b++) {
      const buffer = new Uint8Array(256 * 1024)
      buffer.set(enc.encode(Array.from({ length: 300 }, (_, i) => `line ${b}.${i}\n`).join("")), 0)
      buffers.push(buffer)
      pipeline.push("stdout", buffer.subarray(0, buffer.indexOf(0)))
    }
    scheduler.advance(RELEASE_DELAY_MS)
    const kept = pipeline.ring.query({ limit: 200 })
    expect(kept.length).toBe(100)
    expect(kept[0]?.text).toBe("line 3.200")
    // Only the last buffer had lines left in the ring: one copy of just those 100 lines.
    const copies = new Set(kept.map((line) => line.bytes.buffer))
    expect(copies.size).toBe(1)
    for (const line of kept) expect(buffers.some((b) => b.buffer === line.bytes.buffer)).toBe(false)
    expect([...copies][0]?.byteLength).toBe(kept.reduce((n, line) => n + line.byteLength + 1, 0) - 1)
  })

  for (const match of [undefined, "warn"]) {
    test(`the budget sends from recorded batches what it sends from their lines as objects, and holds bytes (${match ?? "no pattern"})`, async () => {
      // Each flood twice through a tight budget: once as the batcher records it, once with every
      // batch's lines made objects before the budget sees them.
      const asObjects = (batch: OutputBatch) => ({ ...fieldsOf(batch), lines: [...batch.lines] })
      for (const stream of [trickyStream(2800, 6000), logStream(2801, 6000)]) {
        const recorded = await throughBudget(stream, match, (batch) => batch)
        const objects = await throughBudget(stream, match, asObjects)
        expect(recorded.envelopes.length).toBeGreaterThan(10)
        expect(recorded.envelopes.some((text) => text.includes("budget:"))).toBe(true)
        expect(recorded.envelopes).toEqual(objects.envelopes)
        expect(objects.made).toBe(objects.lines)
      }
    })
  }

  test("a flood the budget holds back stays bytes: only lines sent or looked at become objects", async () => {
    const plain = await throughBudget(logStream(2801, 6000), undefined, (batch) => batch)
    expect(plain.envelopes.some((text) => text.includes("budget:"))).toBe(true)
    expect(plain.lines).toBe(6000)
    expect(plain.made).toBeLessThan(plain.lines / 4)
  })
})

/** `lines` lines of a plain log: requests, some warnings, now and then an error. */
function logStream(seed: number, lines: number): Uint8Array {
  const random = prng(seed)
  let text = ""
  for (let i = 0; i < lines; i++) {
    const roll = random()
    const kind = roll < 0.02 ? "ERROR db timeout" : roll < 0.08 ? "warn slow query" : "info GET /api/items 200"
    text += `${i} ${kind} ${Math.floor(random() * 1e6)}ms\n`
  }
  return enc.encode(text)
}

/** A flood through the pipeline and a small observation budget; `admitted` is what the budget is given. */
async function throughBudget(
  stream: Uint8Array,
  match: string | undefined,
  admitted: (batch: OutputBatch) => OutputBatch,
) {
  const config = { ...defaultMonitorConfig(), line_max_bytes: 256 }
  const scheduler = new FakeScheduler()
  const envelopes: string[] = []
  const budget = new ObservationBudget(
    { bytesPerMinute: 30_000, burstBytes: 2_000, sessionBytes: 1_000_000, summaryIntervalMs: 2_000 },
    { scheduler, forward: (batch, _route, label) => envelopes.push(formatMonitorBatch({ batch, label })) },
  )
  const given: OutputBatch[] = []
  const route = { sessionID: "ses_b", wake: false }
  const source = { label: "job", hasPattern: match !== undefined, wakeLimit: 0, matchWakeLeft: false }
  const pipeline = createMonitorPipeline({
    monitorId: "mon_b",
    config,
    filter: await compileLineFilter(match, config.pattern_max_length),
    scheduler,
    onBatch: (batch) => {
      const admit = admitted(batch)
      given.push(admit)
      budget.admit(admit, route, source)
    },
  })
  for (let at = 0; at < stream.length; at += 2048) {
    pipeline.push("stdout", stream.slice(at, at + 2048))
    scheduler.advance(200)
  }
  scheduler.advance(10_000)
  pipeline.finish({ kind: "exited", code: 0 })
  let made = 0
  let lines = 0
  for (const batch of given) {
    const records = linesOf(batch)
    lines += records.length
    for (let i = 0; i < records.length; i++) if (records.made(i)) made++
  }
  return { envelopes, made, lines }
}

/** `count` pieces, each a colour sequence or a piece of text (even odds), as one line. */
function colouredLine(random: () => number, colours: readonly string[], pieces: readonly string[], count: number) {
  let text = ""
  for (let k = 0; k < count; k++) {
    const from = random() < 0.5 ? colours : pieces
    text += from[Math.floor(random() * from.length)]
  }
  return text
}

/** The matcher's raw-bytes answer for `text` as a line of its own, and the line's sanitized text. */
function askRawAndText(matcher: RawWordMatcher, text: string) {
  const block = Buffer.from(`${text}\n`)
  matcher.startBlock(block)
  const answer = matcher.test(0, block.length - 1)
  const clean = new MonitorLine(1, "stdout", block.subarray(0, block.length - 1), false, true).text
  return { answer, clean }
}
