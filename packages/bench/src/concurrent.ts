import { cpuMsSince, drain, type ManagerRun, type RunResult, runMonitors } from "./harness.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatBytesPerSecond, formatCount, formatMs, MB, median } from "./stats.ts"
import { mixedStreamFile, shellQuote } from "./streams.ts"

const MONITORS = 3

type Flow = {
  /** Lowest batches/s of any monitor while all of them ran. */
  minBatchesPerSecond: number
  /** Longest time any monitor went without a batch while all of them ran. */
  maxBatchGapMs: number
  /** Fewest lines of a monitor / most lines of a monitor (1 = perfectly fair). */
  fairness: number
}

/** Batch flow while every monitor was running (from the last start to the first end). */
function flowOf(run: ManagerRun): Flow {
  const from = Math.max(...run.monitors.map((m) => m.startedAt))
  const to = Math.min(...run.monitors.map((m) => m.endedAt))
  const window = Math.max(1, to - from)
  let minRate = Number.POSITIVE_INFINITY
  let maxGap = 0
  for (const monitor of run.monitors) {
    const inside = monitor.batchTimes.filter((t) => t >= from && t <= to)
    minRate = Math.min(minRate, inside.length / (window / 1000))
    let previous = from
    for (const t of inside) {
      maxGap = Math.max(maxGap, t - previous)
      previous = t
    }
    maxGap = Math.max(maxGap, to - previous)
  }
  const lines = run.monitors.map((m) => m.info.counters.total)
  return { minBatchesPerSecond: minRate, maxBatchGapMs: maxGap, fairness: Math.min(...lines) / Math.max(...lines) }
}

/** Three concurrent drains in this process: the baseline for three monitors. */
async function drainAll(command: string): Promise<RunResult> {
  const cpu = process.cpuUsage()
  const started = performance.now()
  const results = await Promise.all(Array.from({ length: MONITORS }, () => drain(command, {})))
  const ms = performance.now() - started
  const cpuMs = cpuMsSince(cpu)
  const worst = results.reduce((a, b) => (b.stall.maxGapMs > a.stall.maxGapMs ? b : a))
  return {
    ms,
    cpuMs,
    bytes: results.reduce((sum, r) => sum + r.bytes, 0),
    lines: results.reduce((sum, r) => sum + r.lines, 0),
    batches: 0,
    stall: worst.stall,
  }
}

/** Benchmark 4: three monitors printing at full speed at once, in one MonitorManager. */
export async function benchConcurrent(plan: Plan): Promise<Row[]> {
  const file = mixedStreamFile(plan.mixedBytes)
  const mixed = `cat ${shellQuote(file.path)}`
  const yes = "yes"
  log(
    `concurrent: ${MONITORS} × ${(file.bytes / MB).toFixed(0)} MB mixed, ${MONITORS} × yes for ${plan.concurrentYesMs / 1000} s, ${plan.reps} reps`,
  )
  await runMonitors([mixed, mixed, mixed].map(() => `cat ${shellQuote(mixedStreamFile(8 * MB).path)}`))

  const mixedDrains: RunResult[] = []
  const mixedRuns: ManagerRun[] = []
  const yesDrains: RunResult[] = []
  const yesRuns: ManagerRun[] = []
  for (let rep = 0; rep < plan.reps; rep++) {
    mixedDrains.push(await drainAll(mixed))
    const run = await runMonitors(
      Array.from({ length: MONITORS }, () => mixed),
      { traceBatches: true },
    )
    for (const m of run.monitors) {
      if (m.info.counters.total !== file.lines)
        throw new Error(`monitor saw ${m.info.counters.total} of ${file.lines} lines`)
    }
    mixedRuns.push(run)
    // A bare drain of endless `yes` never lets its stop timer fire (that is the stall being shown),
    // so the baseline drains a bounded amount instead.
    yesDrains.push(await drainAll(`yes | head -c ${plan.yesBytes}`))
    yesRuns.push(
      await runMonitors(
        Array.from({ length: MONITORS }, () => yes),
        { stopAfterMs: plan.concurrentYesMs, traceBatches: true },
      ),
    )
    log(
      `  rep ${rep + 1}: mixed drain ${mixedDrains[rep]?.ms.toFixed(0)} ms, monitors ${run.ms.toFixed(0)} ms; ` +
        `yes monitors stall ${yesRuns[rep]?.stall.maxGapMs.toFixed(0)} ms`,
    )
  }

  const rows: Row[] = []
  const mixedBytes = MONITORS * file.bytes
  const drainRate = median(mixedDrains.map((r) => r.bytes / (r.ms / 1000)))
  const rate = median(mixedRuns.map((r) => mixedBytes / (r.ms / 1000)))
  rows.push(
    summaryRow(
      `${MONITORS} × ${(file.bytes / MB).toFixed(0)} MB mixed stream, no pattern`,
      mixedRuns,
      mixedDrains,
      rate,
      drainRate,
      (r) => mixedBytes / (r.ms / 1000),
    ),
  )

  const yesDrainRate = median(yesDrains.map((r) => r.lines / (r.ms / 1000)))
  const yesLines = (r: ManagerRun) => r.monitors.reduce((sum, m) => sum + m.info.counters.total, 0) / (r.ms / 1000)
  rows.push(
    summaryRow(
      `${MONITORS} × \`yes\` (2-byte lines) for ${plan.concurrentYesMs / 1000} s`,
      yesRuns,
      yesDrains,
      median(yesRuns.map(yesLines)),
      yesDrainRate,
      yesLines,
      true,
    ),
  )
  return rows
}

function summaryRow(
  label: string,
  runs: ManagerRun[],
  drains: RunResult[],
  rate: number,
  drainRate: number,
  rateOf: (run: ManagerRun) => number,
  linesPerSecond = false,
): Row {
  const flows = runs.map(flowOf)
  const minBatches = median(flows.map((f) => f.minBatchesPerSecond))
  const maxGap = median(flows.map((f) => f.maxBatchGapMs))
  const fairness = median(flows.map((f) => f.fairness))
  const stall = median(runs.map((r) => r.stall.maxGapMs))
  const late = median(runs.map((r) => r.stall.lateTicks / Math.max(1, r.stall.ticks)))
  const fmt = linesPerSecond ? (v: number) => `${formatCount(v)} lines/s` : formatBytesPerSecond
  const noStarvation = maxGap <= 1_000 && minBatches >= 1
  return {
    bench: "4 three monitors",
    case: `${label}: aggregate`,
    figure:
      `${fmt(rate)}; per monitor ≥ ${formatCount(minBatches)} batches/s, longest batch gap ${formatMs(maxGap)}, ` +
      `fairness ${fairness.toFixed(2)}; timer late (>40 ms) ${(late * 100).toFixed(1)}% of ticks`,
    baseline: `${fmt(drainRate)} (3 drains at once; their stall ${formatMs(median(drains.map((d) => d.stall.maxGapMs)))})`,
    ratio: rate / drainRate,
    target: "no monitor starves (batch gap ≤ flush interval 1 s); timer on time",
    met: noStarvation && stall <= 50,
    stallMs: stall,
    stallWorstMs: Math.max(...runs.map((r) => r.stall.maxGapMs)),
    runs: runs.length,
    detail: { flows, rates: runs.map(rateOf), stall: runs.map((r) => r.stall) },
  }
}
