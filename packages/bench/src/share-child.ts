/**
 * One run of a runaway printer in a fresh process: `yes` through MonitorManager (default options,
 * so the real `output_cpu_share`) and on through routing and the observation budget, as in the
 * server, for a fixed time. Samples this process's CPU time and RSS every 100 ms.
 * Usage: bun share-child.ts <ms>; prints one line `SHARE_RESULT {json}`.
 */
import { runMonitors, sleep } from "./harness.ts"
import { median } from "./stats.ts"

/** One sample: ms since the monitor started, CPU ms of this process since then, RSS bytes. */
export type ShareSample = [atMs: number, cpuMs: number, rssBytes: number]

export type ShareResult = {
  ms: number
  cpuMs: number
  lines: number
  idleRssBytes: number
  stallMaxGapMs: number
  /** The build's `output_cpu_share` default; null when the build has none. */
  outputCpuShare: number | null
  samples: ShareSample[]
}

const SAMPLE_MS = 100

async function main(): Promise<void> {
  const ms = Number(process.argv[2])
  if (!(ms > 0)) throw new Error("usage: share-child.ts <ms>")
  // Settle the idle process as memory-child.ts does: JIT the harness on a tiny run, collect garbage.
  await runMonitors(["printf 'warm\\n'"], { serverPath: true })
  Bun.gc(true)
  await sleep(200)
  const idle: number[] = []
  for (let i = 0; i < 10; i++) {
    idle.push(process.memoryUsage().rss)
    await sleep(10)
  }
  const samples: ShareSample[] = []
  const cpu = process.cpuUsage()
  const started = performance.now()
  const sample = () => {
    const used = process.cpuUsage(cpu)
    samples.push([performance.now() - started, (used.user + used.system) / 1000, process.memoryUsage().rss])
  }
  const sampler = setInterval(sample, SAMPLE_MS)
  const run = await runMonitors(["yes"], { stopAfterMs: ms, serverPath: true })
  clearInterval(sampler)
  sample()
  const result: ShareResult = {
    ms: run.ms,
    cpuMs: run.cpuMs,
    lines: run.monitors[0]?.info.counters.total ?? 0,
    idleRssBytes: median(idle),
    stallMaxGapMs: run.stall.maxGapMs,
    outputCpuShare: run.outputCpuShare ?? null,
    samples,
  }
  process.stdout.write(`SHARE_RESULT ${JSON.stringify(result)}\n`)
  process.exit(0)
}

await main()
