export type MonitorStream = "stdout" | "stderr"

/**
 * One captured line, a plain record. Its bytes are `block[start, end)`, a range of the read it came in;
 * the ring may move them to a compact copy so a retained line never holds a large read buffer. Its text
 * is decoded only when it is formatted.
 */
export type MonitorLine = {
  readonly seq: number
  readonly stream: MonitorStream
  block: Uint8Array
  start: number
  end: number
  /** Cut at `line_max_bytes` (or to fit one envelope); the rest was dropped and counted. */
  readonly truncated: boolean
  /** Matched `match_pattern` (every line does without one). */
  matched: boolean
  /** Matched `wake_pattern` while the monitor had match wakes left: the batch carrying it may wake. */
  wake: boolean
  /** UTF-8 bytes the line takes in an envelope (rows, prefixes, line breaks), at most: what `batch_max_bytes` counts. */
  size: number
}

/** A line made from text (a test, or a line a previous server recorded); `size` is set by whoever batches it. */
export function textLine(
  seq: number,
  stream: MonitorStream,
  text: string,
  flags: { truncated?: boolean; matched?: boolean; wake?: boolean } = {},
): MonitorLine {
  const block = new TextEncoder().encode(text)
  return {
    seq,
    stream,
    block,
    start: 0,
    end: block.length,
    truncated: flags.truncated ?? false,
    matched: flags.matched ?? true,
    wake: flags.wake ?? false,
    size: 0,
  }
}

export const lineByteLength = (line: MonitorLine): number => line.end - line.start

/** The line's printable text: decoded as UTF-8 (U+FFFD for an invalid byte) and sanitized. */
export function lineText({ block, start, end }: MonitorLine): string {
  return sanitizeLineText(Buffer.from(block.buffer, block.byteOffset + start, end - start).toString("utf8"))
}

// Bun.stripANSI removes CSI, OSC and DCS/SOS/PM/APC payloads (sixel, kitty images), 7- and 8-bit. node's
// stripVTControlCharacters keeps DCS/PM/APC payloads and 8-bit OSC/DCS text: the fallback removes those first.
const runtimeStripAnsi = (globalThis as { Bun?: { stripANSI?: (text: string) => string } }).Bun?.stripANSI
// DCS, SOS, PM, APC (7-bit ESC P/X/^/_ or 8-bit C1), up to ST (ESC \ or U+009C), BEL, or the end.
const STRING_SEQUENCE = /(?:\x1b[PX^_\]]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?/g
export function fallbackStripAnsi(text: string): string {
  // node:util is loaded only here: its load is a tenth of the plugin's, and under Bun it is never used.
  const { stripVTControlCharacters } = process.getBuiltinModule("node:util")
  return stripVTControlCharacters(text.replace(STRING_SEQUENCE, ""))
}
const stripAnsi: (text: string) => string = runtimeStripAnsi ?? fallbackStripAnsi

// Line breaks a reader would see besides \n: each becomes a real break that the envelope prefixes.
const VISUAL_BREAK = /[\v\f\u0085\u2028\u2029]/g
// C0/C1 controls and DEL (not tab, newline); bidi controls; zero-width characters, word joiners, invisible
// operators, BOM, interlinear annotations; tag characters (U+E0000 block, "ASCII smuggling").
const CONTROL =
  /[\x00-\x08\x0e-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]|\udb40[\udc00-\udc7f]/g

// Anything sanitizeLineText would change; most lines have none of it and are returned as they are.
const NEEDS_WORK =
  /[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]|\udb40[\udc00-\udc7f]/

export function sanitizeLineText(raw: string): string {
  if (!NEEDS_WORK.test(raw)) return raw
  let text = raw
  if (text.includes("\r")) {
    // A CR redraws the line: keep what the terminal would finally show (the last non-empty frame).
    const frames = text.split("\r").filter((frame) => frame.length > 0)
    text = frames[frames.length - 1] ?? ""
  }
  if (/[\x1b\x80-\x9f]/.test(text)) text = stripAnsi(text)
  return text.replace(VISUAL_BREAK, "\n").replace(CONTROL, "")
}
