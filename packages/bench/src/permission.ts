/**
 * What permission parity costs: the latency monitor_start adds to parse a command and
 * work out its permission questions, over CALLS calls in a fresh process (the first call loads
 * web-tree-sitter and the grammar), against the cost monitor_start already has — spawning the
 * shell — measured in the same run; and that loading the plugin does not load the parser.
 */
import { spawn, spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatMs, median, percentile } from "./stats.ts"

const CHILD = fileURLToPath(new URL("./permission-child.ts", import.meta.url))
const CALLS = 200

function child<T>(args: string[]): Promise<T> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [CHILD, ...args], { stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    proc.stdout.on("data", (chunk) => {
      out += chunk
    })
    proc.once("exit", (code) =>
      code === 0 ? resolve(JSON.parse(out) as T) : reject(new Error(`child exited ${code}`)),
    )
  })
}

/** How long spawning `bash -c true` takes: what every monitor_start pays already. */
function spawnMs(): number {
  const t = performance.now()
  spawnSync(Bun.which("bash") ?? "/bin/sh", ["-c", "true"], { stdio: "ignore" })
  return performance.now() - t
}

export async function benchPermission(plan: Plan): Promise<Row[]> {
  const p50s: number[] = []
  const p95s: number[] = []
  const firsts: number[] = []
  const spawns: number[] = []
  const loads: number[] = []
  const parsers: number[] = []
  let loadedByPlugin = false
  for (let run = 0; run < plan.reps; run++) {
    const { times } = await child<{ times: number[] }>(["questions", String(CALLS)])
    p50s.push(percentile(times, 50))
    p95s.push(percentile(times, 95))
    firsts.push(times[0] ?? 0)
    spawns.push(median(Array.from({ length: 20 }, spawnMs)))
    const load = await child<{ loadMs: number; parserMs: number; loadedByPlugin: boolean }>(["load"])
    loads.push(load.loadMs)
    parsers.push(load.parserMs)
    loadedByPlugin ||= load.loadedByPlugin
    log(
      `permission ${run + 1}/${plan.reps}: p50 ${formatMs(p50s[run] ?? 0)}, p95 ${formatMs(p95s[run] ?? 0)}, first ${formatMs(firsts[run] ?? 0)}`,
    )
  }
  const spawn = median(spawns)
  const row = (name: string, values: number[], target: string, met: boolean | undefined): Row => ({
    bench: "permission parsing",
    case: name,
    figure: formatMs(median(values)),
    baseline: `${formatMs(spawn)} (spawn bash -c true)`,
    ratio: median(values) / spawn,
    target,
    met,
    stallMs: 0,
    stallWorstMs: 0,
    runs: plan.reps,
    detail: { values, spawns },
  })
  return [
    row(`monitor_start added latency, p50 of ${CALLS} calls`, p50s, "below one shell spawn", median(p50s) < spawn),
    row(`monitor_start added latency, p95 of ${CALLS} calls (first call included)`, p95s, "–", undefined),
    row("first call (loads web-tree-sitter + grammar)", firsts, "–", undefined),
    {
      ...row("plugin load (import + server factory)", loads, "parser not loaded at plugin load", !loadedByPlugin),
      baseline: `${formatMs(median(parsers))} (loading the parser, done later)`,
      ratio: median(loads) / median(parsers),
    },
  ]
}
