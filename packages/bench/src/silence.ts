import { monitorOnce, type RunResult, runMonitors } from "./harness.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatBytesPerSecond, formatCount, MB, median } from "./stats.ts"
import { mixedStreamFile, shellQuote } from "./streams.ts"

const SILENCE_MS = 1_000
const TARGET = 0.95

/**
 * `wake_on_silence_ms` must cost a chatty monitor nothing that shows (output only stamps
 * a time; one timer per silence period). The same stream runs through MonitorManager with and
 * without it, interleaved per repetition (the order alternates): once as `cat` writes it (64 KiB
 * chunks), once written one line per write (`awk` with fflush), where the per-chunk work is
 * largest. Each ratio is against the run without the option, in the same run; medians of twice
 * the plan's repetitions.
 */
export async function benchSilence(plan: Plan): Promise<Row[]> {
  const big = mixedStreamFile(plan.mixedBytes)
  const small = mixedStreamFile(Math.max(8 * MB, plan.mixedBytes / 16))
  const streams = [
    {
      id: "cat",
      what: `${(big.bytes / MB).toFixed(0)} MB mixed, cat (64 KiB chunks)`,
      file: big,
      command: `cat ${shellQuote(big.path)}`,
    },
    {
      id: "awk",
      what: `${(small.bytes / MB).toFixed(0)} MB mixed, one write per line (awk fflush)`,
      file: small,
      command: `awk '{ print; fflush() }' ${shellQuote(small.path)}`,
    },
  ]
  // Twice the plan's repetitions: each run is short, and the difference sought is small.
  const reps = plan.reps * 2
  log(`silence: ${streams.map((s) => s.what).join("; ")}; ${reps} reps`)
  const warm = `cat ${shellQuote(mixedStreamFile(8 * MB).path)}`
  await monitorOnce(warm)
  // The option must reach the monitor, or this would compare a run with itself.
  const armed = await runMonitors([warm], { silenceMs: SILENCE_MS })
  if (armed.monitors[0]?.info.silenceMs !== SILENCE_MS) throw new Error("wake_on_silence_ms did not reach the monitor")

  const runs = new Map<string, RunResult[]>()
  for (let rep = 0; rep < reps; rep++) {
    for (const stream of streams) {
      const variants: [string, { silenceMs?: number }][] = [
        [`${stream.id}:off`, {}],
        [`${stream.id}:on`, { silenceMs: SILENCE_MS }],
      ]
      if (rep % 2 === 1) variants.reverse()
      for (const [key, options] of variants) {
        const result = await monitorOnce(stream.command, options)
        if (result.lines !== stream.file.lines) throw new Error(`${key}: ${result.lines} of ${stream.file.lines} lines`)
        runs.set(key, [...(runs.get(key) ?? []), { ...result, bytes: stream.file.bytes }])
      }
    }
    log(
      `  rep ${rep + 1}: ${[...runs.keys()].map((key) => `${key} ${(runs.get(key)?.[rep]?.ms ?? 0).toFixed(0)} ms`).join(", ")}`,
    )
  }

  const rate = (key: string) => median((runs.get(key) ?? []).map((r) => r.bytes / (r.ms / 1000)))
  const rows: Row[] = []
  for (const stream of streams) {
    const on = runs.get(`${stream.id}:on`) ?? []
    const ratio = rate(`${stream.id}:on`) / rate(`${stream.id}:off`)
    rows.push({
      bench: "silence",
      case: `wake_on_silence_ms ${SILENCE_MS} vs none, ${stream.what}`,
      figure: `${formatBytesPerSecond(rate(`${stream.id}:on`))}, ${formatCount(median(on.map((r) => r.lines / (r.ms / 1000))))} lines/s`,
      baseline: `${formatBytesPerSecond(rate(`${stream.id}:off`))} (same stream, no wake_on_silence_ms)`,
      ratio,
      target: `≥ ${TARGET}×`,
      met: ratio >= TARGET,
      stallMs: median(on.map((r) => r.stall.maxGapMs)),
      stallWorstMs: Math.max(...on.map((r) => r.stall.maxGapMs)),
      runs: on.length,
      detail: { ms: on.map((r) => r.ms), baselineMs: runs.get(`${stream.id}:off`)?.map((r) => r.ms) },
    })
  }
  return rows
}
