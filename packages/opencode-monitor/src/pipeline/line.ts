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

  /** Printable text: final state of `\r` redraws, no ANSI or control characters. */
  get text(): string {
    if (this.cachedText === undefined) this.cachedText = sanitizeLineText(decoder.decode(this.bytes))
    return this.cachedText
  }
}

// CSI, OSC (ended by BEL or ST) and two-byte escape sequences; all patterns are linear.
const ANSI_SEQUENCE = /\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?/g
// Line breaks a reader would see besides \n: each becomes a real break that the envelope prefixes.
const VISUAL_BREAK = /[\v\f\u0085\u2028\u2029]/g
// Remaining C0/C1 controls and DEL (tab and newline are kept); bidi overrides that reorder text.
const CONTROL = /[\x00-\x08\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g

// Anything sanitizeLineText would change; most lines have none of it and are returned as they are.
const NEEDS_WORK = /[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/

/** Sanitizes one decoded line of process output. */
export function sanitizeLineText(raw: string): string {
  if (!NEEDS_WORK.test(raw)) return raw
  let text = raw
  if (text.includes("\r")) {
    // A CR redraws the line: keep what the terminal would finally show (the last non-empty frame).
    const frames = text.split("\r").filter((frame) => frame.length > 0)
    text = frames[frames.length - 1] ?? ""
  }
  if (text.includes("\x1b")) text = text.replace(ANSI_SEQUENCE, "")
  return text.replace(VISUAL_BREAK, "\n").replace(CONTROL, "")
}
