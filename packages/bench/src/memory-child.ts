/**
 * One memory measurement in a fresh process, so measurements cannot pollute each other.
 * Usage: bun memory-child.ts <pipeline|drain> <stopAfterMs> <command>
 * Prints one line `MEMORY_RESULT {json}` on stdout.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { drain, runMonitors, sleep } from "./harness.ts"
import { max, median } from "./stats.ts"

export type MemoryResult = {
  mode: "pipeline" | "drain"
  idleRssBytes: number
  /** Highest RSS sampled every 10 ms during the measurement. */
  peakSampledRssBytes: number
  /** VmHWM after resetting it at the start (Linux), catches peaks between samples. */
  peakHwmRssBytes: number | null
  growthBytes: number
  ms: number
  lines: number
  bytes: number
  batches: number
  stallMaxGapMs: number
  stallP95GapMs: number
}

function vmHwmBytes(): number | null {
  try {
    const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))
    return match ? Number(match[1]) * 1024 : null
  } catch {
    return null
  }
}

function resetHwm(): boolean {
  try {
    // "5" resets the peak RSS (VmHWM) of this process to its current RSS.
    writeFileSync("/proc/self/clear_refs", "5")
    return true
  } catch {
    return false
  }
}

async function main(): Promise<void> {
  const [mode, stopAfter, command] = process.argv.slice(2)
  if ((mode !== "pipeline" && mode !== "drain") || stopAfter === undefined || command === undefined) {
    throw new Error("usage: memory-child.ts <pipeline|drain> <stopAfterMs> <command>")
  }
  const stopAfterMs = Number(stopAfter)
  // Settle the idle process: JIT the harness on a tiny run, collect garbage, then sample.
  if (mode === "pipeline") await runMonitors(["printf 'warm\\n'"])
  else await drain("printf 'warm\\n'")
  Bun.gc(true)
  await sleep(200)
  const idleSamples: number[] = []
  for (let i = 0; i < 10; i++) {
    idleSamples.push(process.memoryUsage().rss)
    await sleep(10)
  }
  const idle = median(idleSamples)
  const hwmReset = resetHwm()

  const samples: number[] = []
  const sampler = setInterval(() => samples.push(process.memoryUsage().rss), 10)
  const started = performance.now()
  let result: Omit<MemoryResult, "idleRssBytes" | "peakSampledRssBytes" | "peakHwmRssBytes" | "growthBytes">
  if (mode === "pipeline") {
    const run = await runMonitors([command], { stopAfterMs, countBytes: true })
    const trace = run.monitors[0]
    result = {
      mode,
      ms: run.ms,
      lines: trace?.info.counters.total ?? 0,
      // Delivered line bytes plus their newlines (no pattern: every line is delivered).
      bytes: (trace?.deliveredBytes ?? 0) + (trace?.info.counters.total ?? 0),
      batches: trace?.batches ?? 0,
      stallMaxGapMs: run.stall.maxGapMs,
      stallP95GapMs: run.stall.p95GapMs,
    }
  } else {
    const run = await drain(command, { stopAfterMs })
    result = {
      mode,
      ms: run.ms,
      lines: run.lines,
      bytes: run.bytes,
      batches: 0,
      stallMaxGapMs: run.stall.maxGapMs,
      stallP95GapMs: run.stall.p95GapMs,
    }
  }
  clearInterval(sampler)
  samples.push(process.memoryUsage().rss)
  void started
  const peakSampled = max(samples)
  const hwm = hwmReset ? vmHwmBytes() : null
  const peak = Math.max(peakSampled, hwm ?? 0)
  const output: MemoryResult = {
    ...result,
    idleRssBytes: idle,
    peakSampledRssBytes: peakSampled,
    peakHwmRssBytes: hwm,
    growthBytes: peak - idle,
  }
  process.stdout.write(`MEMORY_RESULT ${JSON.stringify(output)}\n`)
  process.exit(0)
}

await main()
