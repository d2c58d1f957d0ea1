import { drain, monitorOnce, type RunResult } from "./harness.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatBytesPerSecond, formatCount, MB, median } from "./stats.ts"
import { mixedStreamFile, shellQuote } from "./streams.ts"

type Variant = { name: string; pattern: string | undefined; target: string; minRatio: number | undefined }

const VARIANTS: Variant[] = [
  {
    name: "no match_pattern (default options)",
    pattern: undefined,
    target: "≥ 0.5× (aim), ≥ 0.1× (min)",
    minRatio: 0.1,
  },
  { name: "typical pattern `error|warn|FAIL`", pattern: "error|warn|FAIL", target: "≥ 0.1×", minRatio: 0.1 },
  { name: "adversarial pattern `(\\w|\\d)+$`", pattern: "(\\w|\\d)+$", target: "≥ 0.1×", minRatio: 0.1 },
]

/**
 * Benchmark 1: a child `cat`s a mixed stream as fast as the pipe takes it; the same stream is
 * either merely drained (baseline) or read through the whole MonitorManager.
 */
export async function benchThroughput(plan: Plan): Promise<Row[]> {
  const file = mixedStreamFile(plan.mixedBytes)
  const command = `cat ${shellQuote(file.path)}`
  log(`throughput: ${(file.bytes / MB).toFixed(0)} MB mixed stream, ${file.lines} lines, ${plan.reps} reps`)

  // Warm-up (JIT, page cache): a small stream through every variant, not recorded.
  const warm = mixedStreamFile(8 * MB)
  await drain(`cat ${shellQuote(warm.path)}`)
  for (const variant of VARIANTS) await monitorOnce(`cat ${shellQuote(warm.path)}`, pick(variant))

  const drains: RunResult[] = []
  const runs = new Map<string, RunResult[]>(VARIANTS.map((v) => [v.name, []]))
  for (let rep = 0; rep < plan.reps; rep++) {
    // Interleaved so drift on the noisy machine hits baseline and pipeline alike.
    const baseline = await drain(command)
    if (baseline.bytes !== file.bytes) throw new Error(`drain read ${baseline.bytes} of ${file.bytes} bytes`)
    drains.push(baseline)
    for (const variant of VARIANTS) {
      const result = await monitorOnce(command, pick(variant))
      if (result.lines !== file.lines) throw new Error(`${variant.name}: ${result.lines} of ${file.lines} lines`)
      runs.get(variant.name)?.push({ ...result, bytes: file.bytes })
    }
    log(
      `  rep ${rep + 1}: drain ${baseline.ms.toFixed(0)} ms; ` +
        VARIANTS.map((v) => `${v.pattern ?? "none"} ${(runs.get(v.name)?.[rep]?.ms ?? 0).toFixed(0)} ms`).join(", "),
    )
  }

  const drainRate = median(drains.map((r) => r.bytes / (r.ms / 1000)))
  const drainLines = median(drains.map((r) => r.lines / (r.ms / 1000)))
  const rows: Row[] = [
    {
      bench: "1 throughput",
      case: `baseline: drain only (${(file.bytes / MB).toFixed(0)} MB mixed, same child, 'data' events)`,
      figure: `${formatBytesPerSecond(drainRate)}, ${formatCount(drainLines)} lines/s`,
      baseline: "–",
      ratio: 1,
      target: "–",
      met: undefined,
      stallMs: median(drains.map((r) => r.stall.maxGapMs)),
      stallWorstMs: Math.max(...drains.map((r) => r.stall.maxGapMs)),
      runs: drains.length,
      detail: { file, ms: drains.map((r) => r.ms), stall: drains.map((r) => r.stall) },
    },
  ]
  for (const variant of VARIANTS) {
    const results = runs.get(variant.name) ?? []
    const rate = median(results.map((r) => r.bytes / (r.ms / 1000)))
    const lineRate = median(results.map((r) => r.lines / (r.ms / 1000)))
    const ratio = rate / drainRate
    rows.push({
      bench: "1 throughput",
      case: `MonitorManager, ${variant.name}`,
      figure: `${formatBytesPerSecond(rate)}, ${formatCount(lineRate)} lines/s`,
      baseline: formatBytesPerSecond(drainRate),
      ratio,
      target: variant.target,
      met: variant.minRatio === undefined ? undefined : ratio >= variant.minRatio,
      ...(variant.pattern === undefined
        ? { verdict: `min ${ratio >= 0.1 ? "yes" : "**NO**"}, aim ${ratio >= 0.5 ? "yes" : "**NO**"}` }
        : {}),
      stallMs: median(results.map((r) => r.stall.maxGapMs)),
      stallWorstMs: Math.max(...results.map((r) => r.stall.maxGapMs)),
      runs: results.length,
      detail: {
        pattern: variant.pattern ?? null,
        meetsAim: variant.pattern === undefined ? ratio >= 0.5 : undefined,
        ms: results.map((r) => r.ms),
        batches: results.map((r) => r.batches),
        stall: results.map((r) => r.stall),
      },
    })
  }
  return rows
}

function pick(variant: Variant): { matchPattern?: string } {
  return variant.pattern === undefined ? {} : { matchPattern: variant.pattern }
}
