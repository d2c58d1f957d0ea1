import { stripVTControlCharacters } from "node:util"

export type MonitorStream = "stdout" | "stderr"

const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true })

/**
 * One captured line. It keeps its raw bytes; the sanitized text is computed on first use only,
 * so lines that are never matched, delivered or read cost no decoding on the hot path.
 */
export class MonitorLine {
  private cachedText: string | undefined

  constructor(
    readonly seq: number,
    readonly stream: MonitorStream,
    readonly bytes: Uint8Array,
    readonly truncated: boolean,
    public matched: boolean,
  ) {}

  /** Matched `wake_pattern`: the batch carrying this line may wake the session (SPEC §10). */
  wake = false

  get byteLength(): number {
    return this.bytes.byteLength
  }

  /** Frees the decoded text (an ended monitor keeps only bytes); it is decoded again on use. */
  dropText(): void {
    this.cachedText = undefined
  }

  /** Printable text: final state of `\r` redraws, no ANSI or control characters. */
  get text(): string {
    if (this.cachedText === undefined) this.cachedText = sanitizeLineText(decoder.decode(this.bytes))
    return this.cachedText
  }
}

// The runtime's own ANSI stripper where it is complete: Bun.stripANSI (also in opencode's embedded
// Bun) removes CSI, OSC, the DCS/SOS/PM/APC string payloads (sixel, kitty images) and their 8-bit
// (C1) forms. node's stripVTControlCharacters keeps DCS, PM and APC payloads and 8-bit OSC/DCS
// text, so the fallback removes those string sequences first.
const runtimeStripAnsi = (globalThis as { Bun?: { stripANSI?: (text: string) => string } }).Bun?.stripANSI
// DCS, SOS, PM, APC (7-bit ESC P/X/^/_ or 8-bit C1), up to ST (ESC \ or U+009C), BEL, or the end.
const STRING_SEQUENCE = /(?:\x1b[PX^_\]]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?/g
export function fallbackStripAnsi(text: string): string {
  return stripVTControlCharacters(text.replace(STRING_SEQUENCE, ""))
}
const stripAnsi: (text: string) => string = runtimeStripAnsi ?? fallbackStripAnsi

// Line breaks a reader would see besides \n: each becomes a real break that the envelope prefixes.
const VISUAL_BREAK = /[\v\f\u0085\u2028\u2029]/g
// Remaining C0/C1 controls and DEL (tab and newline are kept); bidi controls that reorder text;
// zero-width characters, word joiners and invisible operators, BOM, the interlinear annotation
// characters; Unicode tag characters (U+E0000 block, "ASCII smuggling").
const CONTROL =
  /[\x00-\x08\x0e-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]|\udb40[\udc00-\udc7f]/g

// Anything sanitizeLineText would change; most lines have none of it and are returned as they are.
const NEEDS_WORK =
  /[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]|\udb40[\udc00-\udc7f]/

/** Sanitizes one decoded line of process output. */
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
