import { lineText, type MonitorLine } from "../pipeline/line"

/** Lines with a seq up to this are "the first lines after start" (startup errors live there). */
const STARTUP_LINES = 20
/** The fixed, documented list of words that make a line error-looking (case-insensitive). */
const ERROR_LOOKING = /error|fail|panic|exception|traceback/i
/** An envelope's text besides its lines (header, status, dropped and budget lines), at most. */
export const ENVELOPE_OVERHEAD_BYTES = 480

const isErrorLooking = (line: MonitorLine): boolean => ERROR_LOOKING.test(lineText(line))

/** A line worth sending past the bucket: one of the first after start, a match_pattern match, an error-looking one. */
export const isPriority = (line: MonitorLine, hasPattern: boolean): boolean =>
  line.seq <= STARTUP_LINES || (hasPattern && line.matched) || isErrorLooking(line)

/** What an envelope of `lines` costs at most. */
export const estimate = (lines: readonly MonitorLine[]): number =>
  lines.reduce((bytes, line) => bytes + line.size, ENVELOPE_OVERHEAD_BYTES)

/** Priority lines (startup, error-looking, matching), then the latest, that fit `available`; undefined if none does. */
export function chooseLines(
  priority: readonly MonitorLine[],
  latest: MonitorLine | undefined,
  available: number,
): MonitorLine[] | undefined {
  const rank = (line: MonitorLine) => (line.seq <= STARTUP_LINES ? 0 : isErrorLooking(line) ? 1 : 2)
  const ordered = [...priority].sort((a, b) => rank(a) - rank(b) || a.seq - b.seq)
  const chosen = new Set<MonitorLine>()
  let cost = ENVELOPE_OVERHEAD_BYTES
  for (const line of latest ? [...ordered, latest] : ordered) {
    if (chosen.has(line) || cost + line.size > available) continue
    if (chosen.size === 0 && line === latest && !priority.includes(line)) return undefined
    chosen.add(line)
    cost += line.size
  }
  return chosen.size > 0 ? [...chosen].sort((a, b) => a.seq - b.seq) : undefined
}
