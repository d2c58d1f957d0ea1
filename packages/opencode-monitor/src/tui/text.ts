// Screen-safe text: output and labels come from an untrusted state file; one printable line, measured in cells.

// CSI, OSC (ended by BEL or ST) and other escape sequences.
const ESCAPE = /\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?/g
// Anything that breaks a line on some terminal, and tabs: one space each.
const BREAKS = /[\t\n\v\f\r\u0085\u2028\u2029]/g
// Other controls, DEL, C1, zero-width and bidi controls, BOM: removed.
const INVISIBLE = /[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g

/** One printable line: no escape sequences, controls, bidi overrides or line breaks. */
export function screenLine(raw: string): string {
  return raw.replace(ESCAPE, "").replace(BREAKS, " ").replace(INVISIBLE, "").replace(/ {2,}/g, " ").trim()
}

// Combining marks (the variation selectors are marks too) and the zero-width joiner.
const ZERO_WIDTH = /^[\p{M}\u200d]$/u

/** Terminal cells of one code point: 0 for combining marks and variation selectors, 2 for wide and emoji. */
function cellWidth(codePoint: number): number {
  if (codePoint < 0x300) return 1
  if (ZERO_WIDTH.test(String.fromCodePoint(codePoint))) return 0
  return isWide(codePoint) ? 2 : 1
}

/** East Asian Wide and Fullwidth code points and emoji shown as pictures: [first, last] pairs, in order. */
const WIDE = [
  0x1100, 0x115f, 0x231a, 0x231b, 0x2329, 0x232a, 0x23e9, 0x23ec, 0x25fd, 0x25fe, 0x2614, 0x2615, 0x2648, 0x2653,
  0x26a1, 0x26a1, 0x26aa, 0x26ab, 0x26bd, 0x26be, 0x26c4, 0x26c5, 0x26ce, 0x26ce, 0x26d4, 0x26d4, 0x26ea, 0x26ea,
  0x26f2, 0x26f5, 0x26fa, 0x26fa, 0x26fd, 0x26fd, 0x2705, 0x2705, 0x270a, 0x270b, 0x2728, 0x2728, 0x274c, 0x274c,
  0x274e, 0x274e, 0x2753, 0x2755, 0x2757, 0x2757, 0x2795, 0x2797, 0x27b0, 0x27b0, 0x27bf, 0x27bf, 0x2b1b, 0x2b1c,
  0x2b50, 0x2b50, 0x2b55, 0x2b55, 0x2e80, 0x303e, 0x3041, 0x33ff, 0x3400, 0x4dbf, 0x4e00, 0x9fff, 0xa000, 0xa4cf,
  0xa960, 0xa97f, 0xac00, 0xd7a3, 0xf900, 0xfaff, 0xfe10, 0xfe19, 0xfe30, 0xfe6f, 0xff00, 0xff60, 0xffe0, 0xffe6,
  0x16fe0, 0x18aff, 0x1b000, 0x1b2ff, 0x1f004, 0x1f004, 0x1f0cf, 0x1f0cf, 0x1f18e, 0x1f18e, 0x1f191, 0x1f19a, 0x1f200,
  0x1f251, 0x1f300, 0x1f64f, 0x1f680, 0x1f6ff, 0x1f7e0, 0x1f7eb, 0x1f90c, 0x1f9ff, 0x1fa70, 0x1faff, 0x20000, 0x3fffd,
]

function isWide(c: number): boolean {
  for (let i = 0; i < WIDE.length; i += 2) if (c >= (WIDE[i] as number) && c <= (WIDE[i + 1] as number)) return true
  return false
}

export function displayWidth(text: string): number {
  let width = 0
  for (const char of text) width += cellWidth(char.codePointAt(0) ?? 0)
  return width
}

/** At most `width` cells; a cut string ends with "…" and never splits a wide character. */
export function truncateToWidth(text: string, width: number): string {
  if (width <= 0) return ""
  if (displayWidth(text) <= width) return text
  let out = ""
  let used = 0
  for (const char of text) {
    const w = cellWidth(char.codePointAt(0) ?? 0)
    if (used + w > width - 1) break
    out += char
    used += w
  }
  return `${out}…`
}

/** `12s`, `3m04s`, `2h05m`: short enough for a sidebar line. */
export function formatElapsed(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000))
  if (total < 60) return `${total}s`
  const minutes = Math.floor(total / 60)
  if (minutes < 60) return `${minutes}m${String(total % 60).padStart(2, "0")}s`
  const hours = Math.floor(minutes / 60)
  return `${hours}h${String(minutes % 60).padStart(2, "0")}m`
}
