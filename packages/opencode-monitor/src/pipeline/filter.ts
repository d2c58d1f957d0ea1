import type { RE2JS } from "re2js"

/**
 * Tests a line's sanitized text. `words` is set when the pattern is plain words joined by `|` (a
 * substring search): then a line can often be decided on its raw bytes, without decoding it.
 */
export type LineFilter = ((text: string) => boolean) & { readonly words?: readonly string[] }

export class PatternError extends Error {
  override name = "PatternError"
}

/**
 * Compiles `match_pattern` (or `wake_pattern`) with RE2 semantics: matching time is linear in the line length for
 * every pattern, so no pattern can stall the server's event loop. No pattern matches every line.
 */
export async function compileLineFilter(
  pattern: string | undefined,
  maxLength: number,
  /** The argument the pattern came from, named in errors (`match_pattern`, `wake_pattern`). */
  argument = "match_pattern",
): Promise<LineFilter | undefined> {
  if (pattern === undefined || pattern === "") return undefined
  if (pattern.length > maxLength) {
    throw new PatternError(
      `${argument} is ${pattern.length} characters long; the limit is ${maxLength} (pattern_max_length). Use a shorter pattern.`,
    )
  }
  // The common case, plain words joined by `|`, is a substring search: same answer as RE2, done
  // natively instead of by a state machine in JavaScript.
  if (/^[^\\^$.|?*+()[\]{}]+(\|[^\\^$.|?*+()[\]{}]+)*$/.test(pattern)) {
    const words = pattern.split("|")
    return Object.assign((text: string) => words.some((word) => text.includes(word)), { words })
  }
  // Loaded on first use: most monitors have no pattern, and the server's start should not pay for it.
  const { RE2JS: Engine } = await import("re2js")
  let compiled: RE2JS
  try {
    compiled = Engine.compile(pattern)
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error)
    throw new PatternError(
      `${argument} ${JSON.stringify(pattern)} is not a valid RE2 regular expression: ${reason}. ` +
        "RE2 has no lookaround or backreferences; see https://github.com/google/re2/wiki/Syntax",
    )
  }
  return (text) => compiled.test(text)
}

// How the bytes of a line can differ from its sanitized text (line.ts) for a printable ASCII word:
// REMOVABLE bytes start something sanitizing deletes (C0 controls but tab, line breaks and CR; DEL;
// ESC and C1 sequences; U+061C, U+180E, U+200B–U+200F, U+202A–U+202E, U+2060–U+2069, U+FEFF,
// U+FFF9–U+FFFB, the U+E0000 tags), which may join text into a word. HIDING bytes may take a word
// that is in the bytes out of the text: a CR keeps only the last frame, an ESC or C1 sequence (OSC,
// DCS…) is deleted with its payload. LEAD bytes start a UTF-8 sequence that may be one of those.
const REMOVABLE = 1
const HIDING = 2
const LEAD = 4
const BYTE_CLASS = new Uint8Array(256)
for (let b = 0x00; b <= 0x08; b++) BYTE_CLASS[b] = REMOVABLE
for (let b = 0x0e; b <= 0x1f; b++) BYTE_CLASS[b] = REMOVABLE
BYTE_CLASS[0x7f] = REMOVABLE
BYTE_CLASS[0x0d] = HIDING
BYTE_CLASS[0x1b] = REMOVABLE | HIDING
for (const b of [0xc2, 0xd8, 0xe1, 0xe2, 0xef, 0xf3]) BYTE_CLASS[b] = LEAD

/** The class of the UTF-8 sequence starting with a LEAD byte at `at` (its next bytes, if any, decide). */
function leadClass(bytes: Uint8Array, at: number, end: number): number {
  const lead = bytes[at] as number
  const b1 = at + 1 < end ? (bytes[at + 1] as number) : -1
  const b2 = at + 2 < end ? (bytes[at + 2] as number) : -1
  if (lead === 0xc2) return b1 >= 0x80 && b1 <= 0x9f ? REMOVABLE | HIDING : 0 // C1 controls
  if (lead === 0xd8) return b1 === 0x9c ? REMOVABLE : 0 // U+061C
  if (lead === 0xe1) return b1 === 0xa0 && b2 === 0x8e ? REMOVABLE : 0 // U+180E
  if (lead === 0xe2) {
    if (b1 === 0x80) return (b2 >= 0x8b && b2 <= 0x8f) || (b2 >= 0xaa && b2 <= 0xae) ? REMOVABLE : 0
    return b1 === 0x81 && b2 >= 0xa0 && b2 <= 0xa9 ? REMOVABLE : 0 // U+2060–U+2069
  }
  if (lead === 0xef) return (b1 === 0xbb && b2 === 0xbf) || (b1 === 0xbf && b2 >= 0xb9 && b2 <= 0xbb) ? REMOVABLE : 0
  return b1 === 0xa0 && (b2 === 0x80 || b2 === 0x81) ? REMOVABLE : 0 // 0xf3: U+E0000–U+E007F
}

/**
 * Decides a `words` filter on a line's raw bytes where that gives the same answer as the filter on
 * its sanitized text: a line with a word in its bytes and no HIDING byte matches, a line without
 * one and no REMOVABLE byte does not. Only for printable ASCII words (UTF-8 decoding maps them to
 * themselves, and sanitizing never makes or changes them). Works one block at a time; lines are
 * asked in order.
 */
export class RawWordMatcher {
  private readonly needles: Buffer[]
  private readonly next: number[]
  private readonly words: WordSet
  private block: Buffer | undefined
  private readonly classed = new ClassedBytes()
  /** For a line on its own (`testAlone`): the block's stay as they are. */
  private readonly alone = new ClassedBytes()

  private constructor(words: readonly string[]) {
    this.needles = words.map((word) => Buffer.from(word, "latin1"))
    this.next = words.map(() => -1)
    this.words = wordSet(this.needles, 0, (text) => this.needles.some((needle) => text.indexOf(needle) !== -1))
  }

  /** A matcher for `filter`, or undefined when its answer needs the decoded text. */
  static for(filter: LineFilter | undefined): RawWordMatcher | undefined {
    const words = filter?.words
    if (!words || words.some((word) => !/^[\x20-\x7e]+$/.test(word))) return undefined
    return new RawWordMatcher(words)
  }

  /** The block the next lines are ranges of. */
  startBlock(block: Uint8Array): void {
    this.block = asBuffer(block)
    this.classed.scan(block, 0, block.length)
    for (let i = 0; i < this.needles.length; i++) this.next[i] = this.block.indexOf(this.needles[i] as Buffer)
  }

  /** true / false when the bytes of `[start, end)` decide; undefined when only the text can. */
  test(start: number, end: number): boolean | undefined {
    const found = this.nextWord(start) < end
    const classed = this.classed
    const from = classed.from(start)
    const to = classed.before(from, end)
    return from === to
      ? found
      : answerOnBytes(this.block as Buffer, start, end, found, this.words, classed.at, from, to)
  }

  /**
   * Where the block's first byte at or after `start` is that starts a word or has a BYTE_CLASS
   * (Infinity: none): a line that ends before it does not match (`test` would say false).
   */
  nextMark(start: number): number {
    const classed = this.classed
    const k = classed.from(start)
    const word = this.nextWord(start)
    return k < classed.count ? Math.min(word, classed.at[k] as number) : word
  }

  /** Where the first word in the block at or after `start` begins (Infinity: none). */
  private nextWord(start: number): number {
    let nearest = Number.POSITIVE_INFINITY
    for (let i = 0; i < this.needles.length; i++) {
      let at = this.next[i] as number
      if (at !== -1 && at < start) {
        at = (this.block as Buffer).indexOf(this.needles[i] as Buffer, start)
        this.next[i] = at
      }
      if (at !== -1 && at < nearest) nearest = at
    }
    return nearest
  }

  /** `test` of a line that is not in the block (it was put together from several reads): on its bytes alone. */
  testAlone(bytes: Uint8Array, start: number, end: number): boolean | undefined {
    const buffer = asBuffer(bytes)
    let found = false
    for (const needle of this.needles) {
      const at = buffer.indexOf(needle, start)
      if (at !== -1 && at + needle.length <= end) found = true
    }
    const alone = this.alone
    alone.scan(bytes, start, end)
    return alone.count === 0 ? found : answerOnBytes(bytes, start, end, found, this.words, alone.at, 0, alone.count)
  }
}

/**
 * Whether a line's sanitized text holds one of `words` in any case, as a RegExp with the `i` flag
 * and no `u` flag tests it: only ASCII letters fold, so the words (lowercase ASCII letters) are
 * found in the raw bytes, each byte folded with `| 0x20`. Decided on the bytes like RawWordMatcher,
 * any line on its own (no block to start).
 */
export class RawCaselessWords {
  private readonly words: Uint8Array[]
  /** Per pair of folded bytes, the words (bit i: word i) that start with it. */
  private readonly starts = new Uint8Array(65_536)
  private readonly set: WordSet
  private readonly classed = new ClassedBytes()

  constructor(words: readonly string[]) {
    if (words.length > 8 || words.some((word) => !/^[a-z]{2,}$/.test(word)))
      throw new Error("RawCaselessWords takes up to 8 lowercase ASCII words of 2 letters or more")
    this.words = words.map((word) => Buffer.from(word, "latin1"))
    this.words.forEach((word, i) => {
      const pair = ((word[0] as number) << 8) | (word[1] as number)
      this.starts[pair] = (this.starts[pair] as number) | (1 << i)
    })
    this.set = wordSet(this.words, 0x20, (text) => this.find(text, 0, text.length))
  }

  /** true / false when the bytes of `block[start, end)` decide; undefined when only the text can. */
  test(block: Uint8Array, start: number, end: number): boolean | undefined {
    const found = this.find(block, start, end)
    const classed = this.classed
    classed.scan(block, start, end)
    return classed.count === 0 ? found : answerOnBytes(block, start, end, found, this.set, classed.at, 0, classed.count)
  }

  private find(bytes: Uint8Array, from: number, to: number): boolean {
    const starts = this.starts
    for (let i = from; i + 1 < to; i++) {
      // `| 0x20` maps a byte to a given lowercase letter exactly when it is that letter in either case.
      const candidates = starts[(((bytes[i] as number) | 0x20) << 8) | ((bytes[i + 1] as number) | 0x20)] as number
      if (candidates !== 0 && wordAt(bytes, i, to, this.words, candidates)) return true
    }
    return false
  }
}

/** Whether one of `words` (bit i of `candidates`: word i, known to start with the bytes at `at`) is at `at`. */
function wordAt(bytes: Uint8Array, at: number, to: number, words: Uint8Array[], candidates: number): boolean {
  for (let w = 0; candidates !== 0; w++, candidates >>= 1) {
    const word = words[w] as Uint8Array
    if ((candidates & 1) === 0 || at + word.length > to) continue
    let k = 2
    while (k < word.length && ((bytes[at + k] as number) | 0x20) === word[k]) k++
    if (k === word.length) return true
  }
  return false
}

// Final bytes of the CSI sequences taken as colour and cursor sequences on raw bytes: SGR (m),
// erase (J K), cursor moves (A–D, G, H, f). Both ANSI strippers of line.ts (the runtime's and the
// fallback) remove such a sequence whole when its parameters are at most 8 groups of at most 4 digits.
const COLOUR_FINALS = "mJKABCDGHf"

/** The words of a raw-bytes check, as `answerOnBytes` needs them for a coloured line. */
type WordSet = {
  /** A text byte matches a word's byte when `byte | fold` equals it. */
  readonly fold: number
  /** Bit `(x << 8) | y` is set when some word holds the (folded) bytes x, y side by side. */
  readonly pairs: Uint32Array
  /** Some word starts with a byte a colour sequence holds after its ESC: it may be found in one. */
  readonly mayStartInSequence: boolean
  /** Whether a word is anywhere in `text`. */
  inText(text: Buffer): boolean
}

const IN_SEQUENCE = [..."[0123456789;", ...COLOUR_FINALS].map((c) => c.charCodeAt(0))

function wordSet(words: readonly Uint8Array[], fold: number, inText: (text: Buffer) => boolean): WordSet {
  const pairs = new Uint32Array(65_536 / 32)
  for (const word of words) {
    for (let k = 1; k < word.length; k++) {
      const pair = ((word[k - 1] as number) << 8) | (word[k] as number)
      pairs[pair >> 5] = (pairs[pair >> 5] as number) | (1 << (pair & 31))
    }
  }
  return {
    fold,
    pairs,
    mayStartInSequence: words.some((word) => IN_SEQUENCE.some((b) => (b | fold) === word[0])),
    inText,
  }
}

/** BYTE_CLASS of two bytes side by side (in either order): the classes of both. */
const PAIR_CLASS = new Uint8Array(65_536)
for (let x = 0; x < 65_536; x++) PAIR_CLASS[x] = (BYTE_CLASS[x & 0xff] as number) | (BYTE_CLASS[x >> 8] as number)

/**
 * Writes to `at` from `n` on where the four-byte word `x` has classed bytes, `first` being where its
 * first byte is (little-endian: its low byte); returns the new end of `at`.
 */
function classedOf(x: number, first: number, at: Int32Array, n: number): number {
  if (BYTE_CLASS[x & 0xff] !== 0) at[n++] = first
  if (BYTE_CLASS[(x >>> 8) & 0xff] !== 0) at[n++] = first + 1
  if (BYTE_CLASS[(x >>> 16) & 0xff] !== 0) at[n++] = first + 2
  if (BYTE_CLASS[x >>> 24] !== 0) at[n++] = first + 3
  return n
}

/**
 * Where the bytes with a BYTE_CLASS are in a range of a block, in order: found a byte pair at a
 * time (PAIR_CLASS), two pairs per four-byte word; only a word with a classed byte is looked at
 * byte by byte (most words of most lines have none).
 */
class ClassedBytes {
  at: Int32Array = new Int32Array(256)
  count = 0
  /** The first position not before the last line asked (see `from`). */
  private next = 0

  /** Finds the classed bytes of `block[start, end)`; lines are then asked in order. */
  scan(block: Uint8Array, start: number, end: number): void {
    this.count = 0
    this.next = 0
    if (end - start < 64) {
      for (let i = start; i < end; i++) this.note(block, i)
      return
    }
    const offset = block.byteOffset
    const words = new Int32Array(block.buffer, 0, block.buffer.byteLength >> 2)
    let i = start
    while (i < end && ((offset + i) & 3) !== 0) this.note(block, i++)
    const to = (offset + end) >> 2
    let w = (offset + i) >> 2
    let at = this.at
    let n = this.count
    // Two words at a time: most pairs of words have no classed byte at all.
    for (; w + 1 < to; w += 2) {
      const x = words[w] as number
      const y = words[w + 1] as number
      const classes =
        (PAIR_CLASS[x & 0xffff] as number) |
        (PAIR_CLASS[x >>> 16] as number) |
        (PAIR_CLASS[y & 0xffff] as number) |
        (PAIR_CLASS[y >>> 16] as number)
      if (classes === 0) continue
      if (n + 8 > at.length) at = this.grow(n)
      n = classedOf(x, (w << 2) - offset, at, n)
      n = classedOf(y, (w << 2) - offset + 4, at, n)
    }
    if (w < to) {
      if (n + 4 > at.length) at = this.grow(n)
      n = classedOf(words[w] as number, (w << 2) - offset, at, n)
    }
    this.count = n
    for (i = Math.max(i, (to << 2) - offset); i < end; i++) this.note(block, i)
  }

  private note(block: Uint8Array, i: number): void {
    if (BYTE_CLASS[block[i] as number] !== 0) this.add(i)
  }

  private add(i: number): void {
    if (this.count === this.at.length) this.grow(this.count)
    this.at[this.count++] = i
  }

  /** Room for more positions, the first `count` kept. */
  private grow(count: number): Int32Array {
    const larger = new Int32Array(this.at.length * 2)
    larger.set(this.at.subarray(0, count))
    this.at = larger
    return larger
  }

  /** The index of the first classed byte at or after `start` (`start` never goes back). */
  from(start: number): number {
    let k = this.next
    while (k < this.count && (this.at[k] as number) < start) k++
    this.next = k
    return k
  }

  /** The index past the last classed byte before `end`, from index `from` on. */
  before(from: number, end: number): number {
    let k = from
    while (k < this.count && (this.at[k] as number) < end) k++
    return k
  }
}

const asBuffer = (block: Uint8Array): Buffer =>
  Buffer.isBuffer(block) ? block : Buffer.from(block.buffer, block.byteOffset, block.byteLength)

/**
 * The answer of a word filter on the sanitized text of `block[start, end)`, from its bytes: `found`
 * says whether a word is in the raw bytes, `at[from, to)` are where its bytes with a BYTE_CLASS are
 * (ClassedBytes; at least one: a line with none is answered by `found` alone). Undefined when only the text can tell.
 */
function answerOnBytes(
  block: Uint8Array,
  start: number,
  end: number,
  found: boolean,
  words: WordSet,
  at: Int32Array,
  from: number,
  to: number,
): boolean | undefined {
  // Colour sequences are all that sanitizing takes out of a coloured line. A word of its text that
  // is not in its bytes spans a place where a sequence was: the text bytes on either side of it
  // are then side by side in the word. The bytes between classed ones are text.
  const { fold, pairs } = words
  let seen = 0
  let coloured = false
  let joins = false
  // The next byte not looked at; the last text byte before it; the text byte before the colour
  // sequences just passed (-1: none, or a text byte came after them).
  let next = start
  let last = -1
  let before = -1
  for (let k = from; k < to; k++) {
    const i = at[k] as number
    if (i < next) continue
    if (i > next) {
      if (before !== -1 && joinsWord(pairs, fold, before, block[next] as number)) joins = true
      before = -1
      last = block[i - 1] as number
    }
    const b = block[i] as number
    const sequence = b === 0x1b ? colourEnd(block, i, end) : -1
    if (sequence !== -1) {
      coloured = true
      if (before === -1) before = last
      next = sequence + 1
      continue
    }
    const kind = BYTE_CLASS[b] as number
    seen |= kind === LEAD ? leadClass(block, i, end) : kind
    last = b
    before = -1
    next = i + 1
  }
  if (next < end && before !== -1 && joinsWord(pairs, fold, before, block[next] as number)) joins = true
  if (!coloured) {
    if (found) return (seen & HIDING) === 0 ? true : undefined
    return (seen & REMOVABLE) === 0 ? false : undefined
  }
  if (seen !== 0) return undefined
  // A word in the bytes that cannot start inside a sequence is in the text as it was.
  if (found ? !words.mayStartInSequence : !joins) return found
  return words.inText(withoutColour(block, start, end))
}

/** Whether the text bytes x, y (folded) are side by side in some word. */
function joinsWord(pairs: Uint32Array, fold: number, x: number, y: number): boolean {
  const pair = ((x | fold) << 8) | (y | fold)
  return (((pairs[pair >> 5] as number) >>> (pair & 31)) & 1) !== 0
}

/** The bytes of a coloured line without its colour sequences (in a buffer reused from line to line). */
function withoutColour(block: Uint8Array, start: number, end: number): Buffer {
  if (scratch.length < end - start) scratch = Buffer.allocUnsafe(end - start)
  const text = scratch
  let copied = 0
  for (let i = start; i < end; i++) {
    const sequence = block[i] === 0x1b ? colourEnd(block, i, end) : -1
    if (sequence !== -1) i = sequence
    else text[copied++] = block[i] as number
  }
  return text.subarray(0, copied)
}

/** Reused for a coloured line without its colour sequences (one allocation, not one per line). */
let scratch = Buffer.allocUnsafe(256)

/** Per byte, 1 when it ends a colour sequence (one of COLOUR_FINALS). */
const COLOUR_FINAL = new Uint8Array(256)
for (const c of COLOUR_FINALS) COLOUR_FINAL[c.charCodeAt(0)] = 1

/**
 * The index of the last byte of a colour or cursor sequence (`ESC [ d;d… final`) starting with
 * the ESC at `at`, or -1 when the bytes there are anything else.
 */
export function colourEnd(bytes: Uint8Array, at: number, end: number): number {
  if (at + 2 >= end || bytes[at + 1] !== 0x5b) return -1
  let groups = 1
  let digits = 0
  for (let i = at + 2; i < end; i++) {
    const b = bytes[i] as number
    if (b >= 0x30 && b <= 0x39) {
      if (++digits > 4) return -1
    } else if (b === 0x3b) {
      if (++groups > 8) return -1
      digits = 0
    } else {
      return COLOUR_FINAL[b] === 1 ? i : -1
    }
  }
  return -1
}
