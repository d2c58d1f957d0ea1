/**
 * Bench 10 (issue 26): the cost of reading the process table with each back end, same run. A
 * whole-table scan is what a stop, a tracking tick with `ps`, and restart recovery pay; the read
 * of one pid is the identity check (pid + start time) of recovery, the state writer and the TUI.
 * Baseline: the /proc back end. Runs alternate between the two so load hits both alike.
 */
import { createProcessTable } from "../../opencode-monitor/src/process/process-table.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatMs, median, p95 } from "./stats.ts"

async function timed(run: () => unknown): Promise<number> {
  const started = performance.now()
  await run()
  return performance.now() - started
}

export async function benchProcessTable(plan: Plan): Promise<Row[]> {
  const proc = createProcessTable("proc")
  const ps = createProcessTable("ps")
  const runs = plan.quick ? 20 : 100
  const times = { procScan: [] as number[], psScan: [] as number[], procRead: [] as number[], psRead: [] as number[] }
  let size = 0
  for (let i = 0; i < runs; i++) {
    times.procScan.push(await timed(async () => (size = (await proc.scan()).length)))
    times.psScan.push(await timed(() => ps.scan()))
    times.procRead.push(await timed(() => proc.read([process.pid])))
    times.psRead.push(await timed(() => ps.read([process.pid])))
  }
  log(`process table: ${size} processes, ${runs} runs per case`)
  const row = (what: string, figure: number[], baseline: number[]): Row => ({
    bench: "process table",
    case: `${what}, ps back end vs /proc (${size} processes)`,
    figure: `p50 ${formatMs(median(figure))}, p95 ${formatMs(p95(figure))}`,
    baseline: `p50 ${formatMs(median(baseline))}, p95 ${formatMs(p95(baseline))}`,
    ratio: median(figure) / median(baseline),
    target: "measured (issue 26)",
    met: undefined,
    stallMs: 0,
    stallWorstMs: 0,
    runs,
    detail: { processes: size, figureRuns: figure, baselineRuns: baseline },
  })
  return [row("one whole-table scan", times.psScan, times.procScan), row("one pid read", times.psRead, times.procRead)]
}
