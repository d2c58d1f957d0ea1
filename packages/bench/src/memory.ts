import { fileURLToPath } from "node:url"
import { resultOfChild } from "./fresh-process.ts"
import type { MemoryResult } from "./memory-child.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatBytesPerSecond, MB, median } from "./stats.ts"

const CHILD = fileURLToPath(new URL("./memory-child.ts", import.meta.url))
const NO_STOP = 3_600_000

/** `yes` with ~100-byte lines (100 zeros + newline), cut at `bytes`. */
const flood100 = (bytes: number) => `yes "$(printf '%0100d' 0)" | head -c ${bytes}`
const yesPlain = (bytes: number) => `yes | head -c ${bytes}`

/** Runs one measurement in a fresh bun process and parses its JSON line. */
export function measureInFreshProcess(
  mode: "pipeline" | "drain",
  command: string,
  stopAfterMs: number,
): Promise<MemoryResult> {
  return resultOfChild<MemoryResult>(CHILD, [mode, String(stopAfterMs), command], "MEMORY_RESULT")
}

type Case = { key: string; label: string; mode: "pipeline" | "drain"; command: string; stopAfterMs: number }

/**
 * Benchmark 2: peak RSS growth over the idle process while monitoring a flood, each run in a
 * fresh bun process. Baseline: the same 100-byte flood merely drained in a fresh process.
 */
export async function benchMemory(plan: Plan): Promise<Row[]> {
  const small = plan.floodSmallBytes
  const large = plan.floodLargeBytes
  const gb = (bytes: number) => (bytes >= 1024 * MB ? `${bytes / (1024 * MB)} GB` : `${bytes / MB} MB`)
  const cases: Case[] = [
    {
      key: "drain",
      label: `baseline: drain only, 100-byte lines, ${gb(small)}`,
      mode: "drain",
      command: flood100(small),
      stopAfterMs: NO_STOP,
    },
    {
      key: "small",
      label: `MonitorManager, 100-byte lines, ${gb(small)}`,
      mode: "pipeline",
      command: flood100(small),
      stopAfterMs: NO_STOP,
    },
    {
      key: "large",
      label: `MonitorManager, 100-byte lines, ${gb(large)}`,
      mode: "pipeline",
      command: flood100(large),
      stopAfterMs: NO_STOP,
    },
    {
      key: "yes",
      label: `MonitorManager, plain \`yes\` (2-byte lines), ${plan.yesMs / 1000} s or ${gb(plan.yesBytes)}`,
      mode: "pipeline",
      command: yesPlain(plan.yesBytes),
      stopAfterMs: plan.yesMs,
    },
  ]
  log(`memory: ${cases.length} cases × ${plan.reps} reps, each in a fresh bun process`)
  const results = new Map<string, MemoryResult[]>(cases.map((c) => [c.key, []]))
  for (let rep = 0; rep < plan.reps; rep++) {
    for (const c of cases) {
      const result = await measureInFreshProcess(c.mode, c.command, c.stopAfterMs)
      results.get(c.key)?.push(result)
    }
    log(
      `  rep ${rep + 1}: ` +
        cases
          .map((c) => {
            const r = results.get(c.key)?.[rep]
            return r ? `${c.key} +${(r.growthBytes / MB).toFixed(0)} MB stall ${r.stallMaxGapMs.toFixed(0)} ms` : c.key
          })
          .join(", "),
    )
  }

  const growth = (key: string) => median((results.get(key) ?? []).map((r) => r.growthBytes))
  const drainGrowth = growth("drain")
  const smallGrowth = growth("small")
  const rows: Row[] = []
  for (const c of cases) {
    const runs = results.get(c.key) ?? []
    const g = growth(c.key)
    const rate = median(runs.map((r) => (c.mode === "drain" ? r.bytes : r.bytes) / (r.ms / 1000)))
    const lineRate = median(runs.map((r) => r.lines / (r.ms / 1000)))
    const isBaseline = c.key === "drain"
    const withinCap = g <= 64 * MB
    const flat = c.key === "large" ? g <= smallGrowth * 1.25 + 4 * MB : true
    rows.push({
      bench: "2 memory",
      case: c.label,
      figure:
        `+${(g / MB).toFixed(1)} MB peak RSS (idle ${(median(runs.map((r) => r.idleRssBytes)) / MB).toFixed(0)} MB); ` +
        `${formatBytesPerSecond(rate)}, ${(lineRate / 1e6).toFixed(2)} M lines/s`,
      baseline: isBaseline ? "–" : `+${(drainGrowth / MB).toFixed(1)} MB (drain)`,
      ratio: isBaseline ? 1 : g / drainGrowth,
      target: isBaseline ? "–" : c.key === "large" ? `≤ 64 MB, flat vs ${gb(small)}` : "≤ 64 MB",
      met: isBaseline ? undefined : withinCap && flat,
      stallMs: median(runs.map((r) => r.stallMaxGapMs)),
      stallWorstMs: Math.max(...runs.map((r) => r.stallMaxGapMs)),
      runs: runs.length,
      detail: {
        command: c.command,
        growthMB: runs.map((r) => r.growthBytes / MB),
        flatnessVsSmall: c.key === "large" ? g / smallGrowth : undefined,
        results: runs,
      },
    })
  }
  return rows
}
