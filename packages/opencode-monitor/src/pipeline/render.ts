import { isUtf8 } from "node:buffer"
import { neutralizeMarkers } from "../codec"
import { lineText, type MonitorLine, type MonitorStream } from "./line"
import { characterBoundary } from "./line-splitter"

/** Visual rows one output line may yield; the rest is cut and counted in `dropped:`. */
export const MAX_ROWS_PER_LINE = 16

type RenderedLine = { rows: string[]; cutBytes: number }

/**
 * The envelope rows of one line: each visual break starts a prefixed row (no content stands alone as an
 * envelope line); empty rows collapse; rows past MAX_ROWS_PER_LINE are cut (`cutBytes`), so one line cannot
 * become thousands. `maxBytes` cuts the text first.
 */
export function renderLine(line: MonitorLine, maxBytes?: number, text = lineText(line)): RenderedLine {
  const prefix = `[${line.stream} seq=${line.seq}] `
  let shown = neutralizeMarkers(text)
  let cutBytes = 0
  let truncated = line.truncated
  if (maxBytes !== undefined && Buffer.byteLength(shown) > maxBytes) {
    const bytes = Buffer.from(shown)
    const kept = characterBoundary(bytes, 0, maxBytes)
    cutBytes = bytes.length - kept
    shown = bytes.subarray(0, kept).toString()
    truncated = true
  }
  const suffix = truncated ? " [truncated]" : ""
  if (!shown.includes("\n")) return { rows: [prefix + shown + suffix], cutBytes }
  const rows: string[] = []
  let previousEmpty = false
  for (const piece of shown.split("\n")) {
    const empty = piece.trim() === ""
    if (empty && previousEmpty) continue
    previousEmpty = empty
    if (rows.length < MAX_ROWS_PER_LINE) rows.push(prefix + piece + suffix)
    else cutBytes += Buffer.byteLength(piece) + 1
  }
  return { rows, cutBytes }
}

/** The exact UTF-8 bytes a line adds to an envelope: its rows, prefixes, suffixes and line breaks. */
export function renderedSize(line: MonitorLine, text?: string): number {
  return renderLine(line, undefined, text).rows.reduce((total, row) => total + Buffer.byteLength(row) + 1, 0)
}

/**
 * The envelope bytes of a one-row line of `byteLength` raw bytes: exact for printable ASCII, an upper bound for
 * valid UTF-8 without a visual break (sanitizing only removes, marker words get no longer replacements).
 */
export function plainRowBytes(byteLength: number, stream: MonitorStream, seq: number, truncated: boolean): number {
  return byteLength + stream.length + decimalDigits(seq) + 9 + (truncated ? 12 : 0)
}

const BREAKS = [[0x0b], [0x0c], [0xc2, 0x85], [0xe2, 0x80, 0xa8], [0xe2, 0x80, 0xa9]].map((b) => Buffer.from(b))

/**
 * Whether every line in `bytes[start, end)` is sized by `plainRowBytes`: valid UTF-8 (an invalid byte becomes a
 * 3-byte U+FFFD) without a visual break. Native searches over the range, once per read.
 */
export function isPlainSpan(bytes: Uint8Array, start: number, end: number): boolean {
  if (end <= start) return true
  const span = Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start)
  return isUtf8(span) && BREAKS.every((needle) => span.indexOf(needle) === -1)
}

/** Where to cut `line` (at a character boundary) so that, marked truncated, it renders within `maxBytes`. */
export function fittedEnd(line: MonitorLine, maxBytes: number): number {
  let end = line.end
  for (;;) {
    const size = renderedSize({ ...line, end, truncated: true })
    if (size <= maxBytes || end <= line.start) return end
    const shorter = line.start + Math.floor(((end - line.start) * maxBytes) / size) - 1
    end = characterBoundary(line.block, line.start, Math.max(line.start, Math.min(end - 1, shorter)))
  }
}

/** How many decimal digits `n` has (a line's prefix grows by one byte with each). */
function decimalDigits(n: number): number {
  if (n < 1e6) return n < 10 ? 1 : n < 100 ? 2 : n < 1e3 ? 3 : n < 1e4 ? 4 : n < 1e5 ? 5 : 6
  return n < 1e7 ? 7 : n < 1e8 ? 8 : n < 1e9 ? 9 : String(n).length
}
