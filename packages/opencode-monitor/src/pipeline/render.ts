import { neutralizeMarkers } from "../codec"
import type { MonitorLine, MonitorStream } from "./line"

/** Visual rows one output line may yield; the rest is cut and counted in `dropped:`. */
export const MAX_ROWS_PER_LINE = 16

type RenderedLine = { rows: string[]; cutBytes: number }

/**
 * The envelope rows of one output line. The text is already free of control characters; every
 * visual break it kept becomes its own prefixed row, so no content can stand alone as an envelope
 * line. A run of empty rows collapses into one, and rows past MAX_ROWS_PER_LINE are cut (their
 * UTF-8 bytes are returned as `cutBytes`), so one line cannot amplify into thousands of rows.
 * With `maxBytes` (a summary's line) the text is first cut to that many bytes, marked `[truncated]`.
 */
export function renderLine(line: MonitorLine, maxBytes?: number): RenderedLine {
  const prefix = `[${line.stream} seq=${line.seq}] `
  let text = neutralizeMarkers(line.text)
  let cutBytes = 0
  let truncated = line.truncated
  if (maxBytes !== undefined && Buffer.byteLength(text) > maxBytes) {
    const kept = cutToBytes(text, maxBytes)
    cutBytes = Buffer.byteLength(text) - Buffer.byteLength(kept)
    text = kept
    truncated = true
  }
  const suffix = truncated ? " [truncated]" : ""
  if (!text.includes("\n")) return { rows: [prefix + text + suffix], cutBytes }
  const rows: string[] = []
  let previousEmpty = false
  for (const piece of text.split("\n")) {
    const empty = piece.trim() === ""
    if (empty && previousEmpty) continue
    previousEmpty = empty
    if (rows.length < MAX_ROWS_PER_LINE) rows.push(prefix + piece + suffix)
    else cutBytes += Buffer.byteLength(piece) + 1
  }
  return { rows, cutBytes }
}

/**
 * UTF-8 bytes a line adds to an envelope (its rows, prefixes, suffixes and line breaks), what
 * `batch_max_bytes` counts. Lines without a visual-break byte take a cheap upper bound.
 */
export function envelopeBytes(line: MonitorLine): number {
  // Hot path (every matched line of a flood): no string is built unless the line may break.
  if (!line.mayBreak) return oneRowBytes(line.byteLength, line.stream, line.seq, line.truncated)
  let total = 0
  for (const row of renderLine(line).rows) total += Buffer.byteLength(row) + 1
  return total
}

/** `envelopeBytes` of a line that cannot break: its one row, prefix, suffix and line break. */
export function oneRowBytes(byteLength: number, stream: MonitorStream, seq: number, truncated: boolean): number {
  return byteLength + stream.length + decimalDigits(seq) + 9 + (truncated ? 12 : 0)
}

/**
 * A cheap upper bound of `envelopeBytes`: exact for a line that cannot break; else every byte
 * decoding to at most 3 (U+FFFD for an invalid byte) and every row carrying its prefix.
 */
export function envelopeBytesBound(line: MonitorLine): number {
  return boundOf(line.byteLength, line.stream, line.seq, line.truncated, line.mayBreak)
}

/** `envelopeBytesBound` from a line's facts (a line the pipeline keeps as bytes). */
export function boundOf(byteLength: number, stream: MonitorStream, seq: number, truncated: boolean, mayBreak: boolean) {
  const row = oneRowBytes(0, stream, seq, truncated)
  return mayBreak ? 3 * byteLength + MAX_ROWS_PER_LINE * row : byteLength + row
}

/** The longest prefix of `text` within `maxBytes` UTF-8 bytes, cut at a code point. */
function cutToBytes(text: string, maxBytes: number): string {
  const bytes = Buffer.from(text)
  let end = maxBytes
  // Back off continuation bytes (10xxxxxx): the cut never splits a character.
  while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end--
  return bytes.subarray(0, end).toString()
}

/** How many decimal digits `n` has (a line's prefix grows by one byte with each). */
export function decimalDigits(n: number): number {
  if (n < 1e6) return n < 10 ? 1 : n < 100 ? 2 : n < 1e3 ? 3 : n < 1e4 ? 4 : n < 1e5 ? 5 : 6
  return n < 1e7 ? 7 : n < 1e8 ? 8 : n < 1e9 ? 9 : String(n).length
}
