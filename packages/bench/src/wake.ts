import { drain, monitorOnce, type RunResult } from "./harness.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatBytesPerSecond, formatCount, MB, median } from "./stats.ts"
import { mixedStreamFile, shellQuote } from "./streams.ts"

// The shapes of benchmark 1's patterns: plain words (the substring fast path, few lines match) and
// an RE2 state machine (nearly every line matches).
const SHAPES = ["error|warn|FAIL", "(\\w|\\d)+$"]

type Variant = { id: string; options: (pattern: string) => { matchPattern?: string; wakePattern?: string } }
const VARIANTS: Variant[] = [
  { id: "match", options: (p) => ({ matchPattern: p }) },
  { id: "wake", options: (p) => ({ wakePattern: p }) },
  { id: "both", options: (p) => ({ matchPattern: p, wakePattern: p }) },
]

/**
 * A `wake_pattern` must cost the pipeline no more than a `match_pattern` of the same
 * shape. The mixed stream of benchmark 1 runs through MonitorManager with no pattern, with each
 * pattern as match_pattern, as wake_pattern, and as both, interleaved per repetition (the order
 * rotates); every ratio is against a baseline from the same run.
 */
export async function benchWake(plan: Plan): Promise<Row[]> {
  const file = mixedStreamFile(plan.mixedBytes)
  const command = `cat ${shellQuote(file.path)}`
  log(`wake: ${(file.bytes / MB).toFixed(0)} MB mixed stream, ${file.lines} lines, ${plan.reps} reps`)
  const warm = `cat ${shellQuote(mixedStreamFile(8 * MB).path)}`
  await monitorOnce(warm)
  for (const shape of SHAPES) for (const v of VARIANTS) await monitorOnce(warm, v.options(shape))

  const runs = new Map<string, RunResult[]>()
  const record = (key: string, result: RunResult) =>
    runs.set(key, [...(runs.get(key) ?? []), { ...result, bytes: file.bytes }])
  const jobs: [string, () => Promise<RunResult>][] = [
    ["drain", () => drain(command)],
    ["none", () => monitorOnce(command)],
    ...SHAPES.flatMap((shape) =>
      VARIANTS.map((v): [string, () => Promise<RunResult>] => [
        `${v.id}:${shape}`,
        () => monitorOnce(command, v.options(shape)),
      ]),
    ),
  ]
  for (let rep = 0; rep < plan.reps; rep++) {
    // Rotated each repetition, so drift on the noisy machine hits every variant alike.
    const order = [...jobs.slice(rep % jobs.length), ...jobs.slice(0, rep % jobs.length)]
    for (const [key, run] of order) {
      const result = await run()
      if (key !== "drain" && result.lines !== file.lines)
        throw new Error(`${key}: ${result.lines} of ${file.lines} lines`)
      record(key, result)
    }
    log(
      `  rep ${rep + 1}: ${jobs.map(([key]) => `${key} ${(runs.get(key)?.[rep]?.ms ?? 0).toFixed(0)} ms`).join(", ")}`,
    )
  }

  const rate = (key: string) => median((runs.get(key) ?? []).map((r) => r.bytes / (r.ms / 1000)))
  const row = (key: string, what: string, baseKey: string, baseName: string, extra: Partial<Row> = {}): Row => {
    const results = runs.get(key) ?? []
    return {
      bench: "wake",
      case: what,
      figure: `${formatBytesPerSecond(rate(key))}, ${formatCount(median(results.map((r) => r.lines / (r.ms / 1000))))} lines/s`,
      baseline: `${formatBytesPerSecond(rate(baseKey))} (${baseName})`,
      ratio: rate(key) / rate(baseKey),
      target: "–",
      met: undefined,
      stallMs: median(results.map((r) => r.stall.maxGapMs)),
      stallWorstMs: Math.max(...results.map((r) => r.stall.maxGapMs)),
      runs: results.length,
      detail: {
        ms: results.map((r) => r.ms),
        batches: results.map((r) => r.batches),
        baselineMs: runs.get(baseKey)?.map((r) => r.ms),
      },
      ...extra,
    }
  }
  const rows: Row[] = [row("none", `no pattern (${(file.bytes / MB).toFixed(0)} MB mixed)`, "drain", "drain only")]
  for (const shape of SHAPES) {
    const name = `\`${shape}\``
    rows.push(row(`match:${shape}`, `match_pattern ${name}`, "none", "no pattern"))
    const ratio = rate(`wake:${shape}`) / rate(`match:${shape}`)
    rows.push(
      row(
        `wake:${shape}`,
        `wake_pattern ${name} vs match_pattern ${name}`,
        `match:${shape}`,
        "match_pattern, same shape",
        {
          target: "≥ 0.9× (no more cost than match_pattern, within noise)",
          met: ratio >= 0.9,
        },
      ),
    )
    // A match_pattern's unmatched lines are not delivered, while wake_pattern alone
    // delivers every line: what the wake check adds shows against a run that delivers them all too.
    rows.push(
      row(`wake:${shape}`, `wake_pattern ${name} vs no pattern (both deliver every line)`, "none", "no pattern"),
    )
    rows.push(
      row(
        `both:${shape}`,
        `match_pattern + wake_pattern ${name} vs match_pattern alone`,
        `match:${shape}`,
        "match_pattern alone",
      ),
    )
  }
  return rows
}
