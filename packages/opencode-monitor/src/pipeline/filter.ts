import { errorText } from "../errors"

/**
 * Tests a line's sanitized text (what the envelope would show, before marker neutralizing). A pattern
 * of plain printable-ASCII words lists them in `words`: a line is then judged on its bytes when they are its text.
 */
export type LineFilter = ((text: string) => boolean) & { readonly words?: readonly string[] }

export class PatternError extends Error {
  override name = "PatternError"
}

/** RE2 (linear time: no pattern can stall the event loop); undefined without a pattern (every line matches). */
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
  // Plain words joined by `|`: a native substring search gives RE2's answer, faster.
  if (/^[^\\^$.|?*+()[\]{}]+(\|[^\\^$.|?*+()[\]{}]+)*$/.test(pattern)) {
    const words = pattern.split("|")
    const test = (text: string) => words.some((word) => text.includes(word))
    return /^[\x20-\x7e]+$/.test(pattern) ? Object.assign(test, { words }) : test
  }
  // Loaded on first use: most monitors have no pattern, and the server's start should not pay for it.
  const { RE2JS: Engine } = await import("re2js")
  try {
    const compiled = Engine.compile(pattern)
    return (text) => compiled.test(text)
  } catch (error) {
    throw new PatternError(
      `${argument} ${JSON.stringify(pattern)} is not a valid RE2 regular expression: ${errorText(error)}. ` +
        "RE2 has no lookaround or backreferences; see https://github.com/google/re2/wiki/Syntax",
    )
  }
}
