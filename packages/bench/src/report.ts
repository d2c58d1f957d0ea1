import { formatMs, formatRatio } from "./stats.ts"

/** One line of the results table. */
export type Row = {
  bench: string
  case: string
  /** The measured figure (median over `runs`), formatted. */
  figure: string
  /** The baseline measured in the same run (median), formatted. */
  baseline: string
  /** figure / baseline (for times and memory: how many times the baseline's cost). */
  ratio: number
  target: string
  /** undefined: no target for this row. */
  met: boolean | undefined
  /** Overrides the yes/NO cell when a row has more than one target (e.g. "min yes, aim NO"). */
  verdict?: string
  /** STALL: longest gap of a 20 ms timer in the process running the pipeline, median over runs. */
  stallMs: number
  /** The worst of the per-run longest gaps. */
  stallWorstMs: number
  runs: number
  /** Raw per-run figures for the JSON file. */
  detail: Record<string, unknown>
}

const verdict = (met: boolean | undefined): string => (met === undefined ? "–" : met ? "yes" : "**NO**")

export function markdownTable(rows: readonly Row[]): string {
  const header =
    "| # | benchmark | case | figure (median) | baseline (median, same run) | ratio | target | met | stall: max timer gap, median (worst) | runs |"
  const rule = "|---|---|---|---|---|---|---|---|---|---|"
  const body = rows.map((row, index) =>
    [
      "",
      String(index + 1),
      row.bench,
      row.case,
      row.figure,
      row.baseline,
      formatRatio(row.ratio),
      row.target,
      row.verdict ?? verdict(row.met),
      `${formatMs(row.stallMs)} (${formatMs(row.stallWorstMs)})`,
      String(row.runs),
      "",
    ]
      .join(" | ")
      .trim(),
  )
  return [header, rule, ...body].join("\n")
}
