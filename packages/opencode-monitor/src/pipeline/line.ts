import { searchView } from "./line-splitter"

export type MonitorStream = "stdout" | "stderr"

const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true })

// Bytes that may become a visual break (\v, \f, the lead bytes of U+0085 and U+2028/U+2029): a line
// without any of them renders as one envelope row.
const BREAK_BYTES = [0x0b, 0x0c, 0xc2, 0xe2] as const

/** Whether `bytes[start, end)` holds a byte that may become a visual break. */
export function hasBreakByte(bytes: Uint8Array, start: number, end: number): boolean {
  if (end - start > LONG_RANGE) {
    // A native search per break byte over a long range (a 20 KB line) costs far less than a byte loop.
    const range = new Uint8Array(bytes.buffer, bytes.byteOffset + start, end - start)
    return BREAK_BYTES.some((b) => range.indexOf(b) !== -1)
  }
  for (let i = start; i < end; i++) {
    const b = bytes[i]
    if (b === 0x0b || b === 0x0c || b === 0xc2 || b === 0xe2) return true
  }
  return false
}

/** Above this many bytes, `hasBreakByte` searches natively. */
const LONG_RANGE = 256

/** Below every line start: the byte is looked for on the next question. */
const NOT_SEARCHED = -2

/**
 * Answers `hasBreakByte` for the lines of one block, asked in order, with one native search per
 * break byte over the block instead of a scan of every line. A byte is searched for only once a
 * line is asked about (most lines of a pattern's monitor never are).
 */
export class BreakFinder {
  private block: Uint8Array = new Uint8Array(0)
  /** Per break byte: where it is next, from the last line asked (-1: nowhere; NOT_SEARCHED). */
  private readonly next = [NOT_SEARCHED, NOT_SEARCHED, NOT_SEARCHED, NOT_SEARCHED]

  /** How many of the break bytes the block has no more of (most blocks have none at all). */
  private gone = 0

  startBlock(block: Uint8Array): void {
    this.block = searchView(block)
    this.next.fill(NOT_SEARCHED)
    this.gone = 0
  }

  /** Whether `block[start, end)` has a break byte; `start` never goes back between calls. */
  has(start: number, end: number): boolean {
    return this.nextAt(start) < end
  }

  /** Where the first break byte at or after `start` is (Infinity: none); `start` never goes back between calls. */
  nextAt(start: number): number {
    if (this.gone === BREAK_BYTES.length) return Number.POSITIVE_INFINITY
    let nearest = Number.POSITIVE_INFINITY
    for (let i = 0; i < 4; i++) {
      let at = this.next[i] as number
      if (at !== -1 && at < start) {
        at = this.block.indexOf(BREAK_BYTES[i] as number, start)
        this.next[i] = at
        if (at === -1) this.gone++
      }
      if (at !== -1 && at < nearest) nearest = at
    }
    return nearest
  }
}

/**
 * One captured line. It points into the block of bytes it was read in (no copy per line); its
 * `bytes` view and its sanitized text are made on first use only, so lines that are never
 * matched, delivered or read cost neither on the hot path.
 */
export class MonitorLine {
  private cachedText: string | undefined = undefined
  /** Matched `wake_pattern`: the batch carrying this line may wake the session (SPEC §10). */
  wake = false

  /**
   * The line is `block[start, end)` (by default the whole block). `breaks`: 1 when it is known to
   * have no byte that may break it visually, 2 when it has one, 0 when not known yet.
   */
  constructor(
    readonly seq: number,
    readonly stream: MonitorStream,
    private block: Uint8Array,
    readonly truncated: boolean,
    public matched: boolean,
    private start = 0,
    private end = block.length,
    private breaks: 0 | 1 | 2 = 0,
  ) {}

  /** The block this line points into (the ring keeps lines as ranges of it). */
  get source(): Uint8Array {
    return this.block
  }

  get byteLength(): number {
    return this.end - this.start
  }

  get bytes(): Uint8Array {
    return this.start === 0 && this.end === this.block.length ? this.block : this.block.subarray(this.start, this.end)
  }

  /** False when the line has no byte that could become a visual break: it is one envelope row. */
  get mayBreak(): boolean {
    if (this.breaks === 0) this.breaks = hasBreakByte(this.block, this.start, this.end) ? 2 : 1
    return this.breaks === 2
  }

  get blockStart(): number {
    return this.start
  }

  /** Points the line at a copy of its bytes (`copy[start - shift, end - shift)`), so the big block can go. */
  moveTo(copy: Uint8Array, shift: number): void {
    this.block = copy
    this.start -= shift
    this.end -= shift
  }

  /** Printable text: final state of `\r` redraws, no ANSI or control characters. */
  get text(): string {
    if (this.cachedText === undefined) this.cachedText = sanitizeLineText(decodeRange(this.block, this.start, this.end))
    return this.cachedText
  }
}

/**
 * `block[start, end)` decoded as UTF-8 (U+FFFD for each invalid sequence, a BOM kept). A Buffer
 * (what a pipe gives) decodes a range in one call, with no view of it made first.
 */
function decodeRange(block: Uint8Array, start: number, end: number): string {
  return Buffer.isBuffer(block) ? block.toString("utf8", start, end) : decoder.decode(block.subarray(start, end))
}

// The runtime's own ANSI stripper where it is complete: Bun.stripANSI (also in opencode's embedded
// Bun) removes CSI, OSC, the DCS/SOS/PM/APC string payloads (sixel, kitty images) and their 8-bit
// (C1) forms. node's stripVTControlCharacters keeps DCS, PM and APC payloads and 8-bit OSC/DCS
// text, so the fallback removes those string sequences first.
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
