/**
 * `--only=table`: the cost of reading the process table with each back end, same run. A
 * whole-table scan is what a stop, a tracking tick with `ps`, and restart recovery pay; the read
 * of one pid is the identity check (pid + start time) of recovery, the state writer and the TUI.
 * The third row is what a person feels: the longest event-loop gap while 16 TERM-ignoring monitors
 * are stopped at once (grace 1 s), where `ps` is run synchronously for each signal round.
 * Baseline: the /proc back end. Runs alternate between the two so load hits both alike.
 */
import { defaultMonitorConfig } from "../../opencode-monitor/src/config.ts"
import { MonitorManager } from "../../opencode-monitor/src/manager.ts"
import { createProcessTable, type ProcessTable } from "../../opencode-monitor/src/process/process-table.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { StallMeter } from "./stall-meter.ts"
import { startMonitor } from "./start.ts"
import { formatMs, median, p95 } from "./stats.ts"

async function timed(run: () => unknown): Promise<number> {
  const started = performance.now()
  await run()
  return performance.now() - started
}

/** Worst event-loop gap (ms) while 16 TERM-ignoring monitors tracked through `table` are stopped at once. */
async function stopStall(table: ProcessTable): Promise<number> {
  const manager = new MonitorManager(
    { ...defaultMonitorConfig(), kill_grace_ms: 1_000, max_monitors_per_session: 16 },
    { onBatch: () => {}, processTable: table },
  )
  const infos = []
  for (let i = 0; i < 16; i++) {
    infos.push(
      await startMonitor(manager, { sessionID: "stop", directory: process.cwd(), command: "trap '' TERM; sleep 1000" }),
    )
  }
  await new Promise((resolve) => setTimeout(resolve, 500))
  const meter = new StallMeter().start()
  await Promise.all(infos.map((info) => manager.stop("stop", info.id, "agent")))
  return meter.stop().maxGapMs
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
    target: "measured",
    met: undefined,
    stallMs: 0,
    stallWorstMs: 0,
    runs,
    detail: { processes: size, figureRuns: figure, baselineRuns: baseline },
  })
  const stalls = { proc: [] as number[], ps: [] as number[] }
  for (let i = 0; i < plan.reps; i++) {
    stalls.proc.push(await stopStall(proc))
    stalls.ps.push(await stopStall(ps))
  }
  const stop: Row = {
    bench: "process table",
    case: "stop 16 TERM-ignoring monitors at once (grace 1 s): worst event-loop gap, ps back end vs /proc",
    figure: `${formatMs(median(stalls.ps))} (worst ${formatMs(Math.max(...stalls.ps))})`,
    baseline: `${formatMs(median(stalls.proc))} (worst ${formatMs(Math.max(...stalls.proc))})`,
    ratio: median(stalls.ps) / median(stalls.proc),
    target: "measured",
    met: undefined,
    stallMs: median(stalls.ps),
    stallWorstMs: Math.max(...stalls.ps),
    runs: plan.reps,
    detail: stalls,
  }
  return [
    row("one whole-table scan", times.psScan, times.procScan),
    row("one pid read", times.psRead, times.procRead),
    stop,
  ]
}
