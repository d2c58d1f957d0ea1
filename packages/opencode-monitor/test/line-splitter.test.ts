import { describe, expect, test } from "bun:test"
import { lineText, textLine } from "../src/pipeline/line"
import { LineSplitter } from "../src/pipeline/line-splitter"

const enc = new TextEncoder()

function split(chunks: (string | Uint8Array)[], maxBytes = 64) {
  const lines: { text: string; truncated: boolean; bytes: number }[] = []
  let dropped = 0
  const splitter = new LineSplitter(
    maxBytes,
    (block, start, end, truncated) => {
      const line = { ...textLine(lines.length + 1, "stdout", ""), block, start, end, truncated }
      lines.push({ text: lineText(line), truncated, bytes: end - start })
    },
    (n) => {
      dropped += n
    },
  )
  for (const chunk of chunks) splitter.push(typeof chunk === "string" ? enc.encode(chunk) : chunk)
  splitter.end()
  return { lines, dropped }
}

describe("LineSplitter", () => {
  test("a UTF-8 character split across chunks decodes cleanly", () => {
    const bytes = enc.encode("héllo 世界\n")
    // Cut inside "é" (2 bytes) and inside "世" (3 bytes).
    const { lines } = split([bytes.slice(0, 2), bytes.slice(2, 8), bytes.slice(8)])
    expect(lines.map((l) => l.text)).toEqual(["héllo 世界"])
  })

  test("CRLF and LF both end a line", () => {
    expect(split(["one\r\ntwo\nthree\r\n"]).lines.map((l) => l.text)).toEqual(["one", "two", "three"])
  })

  test("a carriage-return progress line keeps its final state, not its first frame", () => {
    const { lines } = split(["progress 10%\rprogress 50%\r", "progress 100%\n"])
    expect(lines.map((l) => l.text)).toEqual(["progress 100%"])
  })

  test("a progress bar redrawn without newlines stays bounded and keeps its last frame", () => {
    const frames = Array.from({ length: 200 }, (_, i) => `\r[${"#".repeat(i % 40)}] ${i}%`).join("")
    const { lines, dropped } = split([frames, "\n"], 64)
    expect(lines).toHaveLength(1)
    expect(lines[0]?.text).toBe(`[${"#".repeat(199 % 40)}] 199%`)
    expect(lines[0]?.truncated).toBe(false)
    expect(dropped).toBe(0)
  })

  test("a line longer than the limit is cut at a character boundary, marked, and the rest counted", () => {
    // 30 three-byte characters = 90 bytes; the limit of 64 falls inside the 22nd character.
    const { lines, dropped } = split(["世".repeat(30), "\nnext\n"], 64)
    expect(lines[0]?.text).toBe("世".repeat(21))
    expect(lines[0]?.bytes).toBe(63)
    expect(lines[0]?.truncated).toBe(true)
    expect(dropped).toBe(90 - 63)
    expect(lines[1]).toEqual({ text: "next", truncated: false, bytes: 4 })
  })

  test("an over-long line is cut the same whether it lies in one chunk or is put together from parts", () => {
    // Over-long lines (cut as a range of the chunk they lie in, or put together from parts), some
    // with CR redraws whose last frame fits or does not, a multi-byte character across the limit,
    // a trailing CR, and short lines between them.
    const lines = [
      "short",
      "x".repeat(100),
      `${"a".repeat(90)}\rdone`,
      `${"b".repeat(90)}\r${"c".repeat(70)}`,
      `${"d".repeat(62)}世世`,
      `${"e".repeat(80)}\r`,
      `${"f".repeat(40)}\r${"g".repeat(40)}\r${"h".repeat(30)}`,
      "",
      "世".repeat(40),
    ]
    const stream = enc.encode(`${lines.join("\n")}\ntail`)
    const cut = (chunks: Uint8Array[]) => {
      const got = { lines: [] as [string, boolean][], dropped: 0 }
      const splitter = new LineSplitter(
        64,
        (block, start, end, truncated) =>
          got.lines.push([Buffer.from(block.subarray(start, end)).toString("latin1"), truncated]),
        (n) => {
          got.dropped += n
        },
      )
      for (const chunk of chunks) splitter.push(chunk)
      splitter.end()
      return got
    }
    const whole = cut([stream])
    // Each line's first byte in a chunk of its own: the line is put together from its parts.
    const pieces: Uint8Array[] = []
    let from = 0
    for (const line of lines) {
      pieces.push(stream.subarray(from, from + 1), stream.subarray(from + 1, from + enc.encode(line).length + 1))
      from += enc.encode(line).length + 1
    }
    pieces.push(stream.subarray(from))
    expect(whole).toEqual(cut(pieces.filter((piece) => piece.length > 0)))
    expect(whole.lines.map(([, truncated]) => truncated)).toEqual([
      false,
      true,
      false,
      true,
      true,
      true,
      false,
      false,
      true,
      false,
    ])
    // x: 100 - 64; c: 70 - 64; d: 68 - 62 (the limit falls inside 世); e: 81 - 64 (a trailing CR is
    // no redraw); 世: 120 - 63.
    expect(whole.dropped).toBe(36 + 6 + 6 + 17 + 57)
  })

  test("an endless line without newline keeps memory bounded and counts every dropped byte", () => {
    const chunk = "x".repeat(1000)
    const { lines, dropped } = split(
      Array.from({ length: 100 }, () => chunk),
      256,
    )
    expect(lines).toHaveLength(1)
    expect(lines[0]?.bytes).toBe(256)
    expect(dropped).toBe(100_000 - 256)
  })

  test("a line put together from parts of a pipe's reads holds a copy, never a read's 64 KB buffer", () => {
    // A pipe's read is a Buffer view of a large buffer; Buffer#slice is a view, so parts are copied.
    const read = (text: string) => {
      const view = Buffer.from(new ArrayBuffer(64 * 1024), 0, text.length)
      view.write(text)
      return view
    }
    const blocks: Uint8Array[] = []
    const splitter = new LineSplitter(
      256,
      (block) => blocks.push(block),
      () => {},
    )
    splitter.push(read("x".repeat(1000)))
    splitter.push(read("y\nstart of a line"))
    splitter.push(read(" and its end\n"))
    splitter.push(read("a last line"))
    splitter.end()
    expect(blocks).toHaveLength(3)
    for (const block of blocks) expect(block.buffer.byteLength).toBeLessThan(1024)
  })

  test("NUL and invalid bytes never discard the valid lines around them", () => {
    const garbage = new Uint8Array([0x66, 0x00, 0x6f, 0xff, 0xfe, 0x6f, 0x0a])
    const { lines } = split(["before\n", garbage, "after\n"])
    expect(lines.map((l) => l.text)).toEqual(["before", "fo\uFFFD\uFFFDo", "after"])
  })

  test("a last line without a trailing newline is emitted at the end", () => {
    expect(split(["a\nb\nno-newline-at-end"]).lines.map((l) => l.text)).toEqual(["a", "b", "no-newline-at-end"])
  })
})

describe("a line's text", () => {
  const text = (s: string) => lineText(textLine(1, "stdout", s))

  test("ANSI colour, cursor movement and OSC sequences are stripped", () => {
    expect(text("\x1b[31merror\x1b[0m: \x1b[2K\x1b[1Afailed \x1b]0;title\x07done")).toBe("error: failed done")
  })

  test("control characters are removed, tabs kept", () => {
    expect(text("a\x00b\x07c\td\x7f")).toBe("abc\td")
  })

  test("line breaks a reader would see become real breaks", () => {
    expect(text("a\vb\fc\u2028d\u2029e\u0085f")).toBe("a\nb\nc\nd\ne\nf")
  })
})
