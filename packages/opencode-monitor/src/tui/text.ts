/**
 * Screen-safe text for the TUI part: process output and labels come from a state file the TUI
 * does not trust, so everything is made one printable line and measured in terminal cells.
 */

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

const MARK = /^\p{M}$/u

/** Terminal cells of one code point: 0 for combining marks and variation selectors, 2 for wide and emoji. */
function cellWidth(codePoint: number): number {
  if (codePoint < 0x300) return 1
  if (
    (codePoint >= 0xfe00 && codePoint <= 0xfe0f) ||
    codePoint === 0x200d ||
    (codePoint >= 0xe0100 && codePoint <= 0xe01ef) ||
    MARK.test(String.fromCodePoint(codePoint))
  ) {
    return 0
  }
  return isWide(codePoint) ? 2 : 1
}

function isWide(c: number): boolean {
  return (
    (c >= 0x1100 && c <= 0x115f) ||
    (c >= 0x231a && c <= 0x231b) ||
    (c >= 0x2329 && c <= 0x232a) ||
    (c >= 0x23e9 && c <= 0x23ec) ||
    (c >= 0x25fd && c <= 0x25fe) ||
    (c >= 0x2614 && c <= 0x2615) ||
    (c >= 0x2648 && c <= 0x2653) ||
    (c >= 0x26aa && c <= 0x26ab) ||
    (c >= 0x26bd && c <= 0x26be) ||
    (c >= 0x26c4 && c <= 0x26c5) ||
    c === 0x26a1 ||
    c === 0x26ce ||
    c === 0x26d4 ||
    c === 0x26ea ||
    (c >= 0x26f2 && c <= 0x26f5) ||
    c === 0x26fa ||
    c === 0x26fd ||
    c === 0x2705 ||
    (c >= 0x270a && c <= 0x270b) ||
    c === 0x2728 ||
    c === 0x274c ||
    c === 0x274e ||
    (c >= 0x2753 && c <= 0x2755) ||
    c === 0x2757 ||
    (c >= 0x2795 && c <= 0x2797) ||
    c === 0x27b0 ||
    c === 0x27bf ||
    (c >= 0x2b1b && c <= 0x2b1c) ||
    c === 0x2b50 ||
    c === 0x2b55 ||
    (c >= 0x2e80 && c <= 0x303e) ||
    (c >= 0x3041 && c <= 0x33ff) ||
    (c >= 0x3400 && c <= 0x4dbf) ||
    (c >= 0x4e00 && c <= 0x9fff) ||
    (c >= 0xa000 && c <= 0xa4cf) ||
    (c >= 0xa960 && c <= 0xa97f) ||
    (c >= 0xac00 && c <= 0xd7a3) ||
    (c >= 0xf900 && c <= 0xfaff) ||
    (c >= 0xfe10 && c <= 0xfe19) ||
    (c >= 0xfe30 && c <= 0xfe6f) ||
    (c >= 0xff00 && c <= 0xff60) ||
    (c >= 0xffe0 && c <= 0xffe6) ||
    (c >= 0x16fe0 && c <= 0x18aff) ||
    (c >= 0x1b000 && c <= 0x1b2ff) ||
    c === 0x1f004 ||
    c === 0x1f0cf ||
    c === 0x1f18e ||
    (c >= 0x1f191 && c <= 0x1f19a) ||
    (c >= 0x1f200 && c <= 0x1f251) ||
    (c >= 0x1f300 && c <= 0x1f64f) ||
    (c >= 0x1f680 && c <= 0x1f6ff) ||
    (c >= 0x1f7e0 && c <= 0x1f7eb) ||
    (c >= 0x1f90c && c <= 0x1f9ff) ||
    (c >= 0x1fa70 && c <= 0x1faff) ||
    (c >= 0x20000 && c <= 0x3fffd)
  )
}

/** Terminal cells a string takes. */
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
