/**
 * Escape rates: how often a child that left the monitor's process group outlives
 * `monitor_stop`, per escape shape, over N runs, with the process table forced to one back end.
 *
 *   bun packages/bench/src/escape-rates.ts --table=proc|ps [--runs=100] [--jobs=4] [--shape=setsid]
 *   bun packages/bench/src/escape-rates.ts --table=off   # run in a tree whose tracking is switched off
 *
 * Each run starts a monitor whose command escapes a `sleep` by the shape, waits until the escaped
 * process runs in another process group, stops the monitor at once (the hardest moment: no tracking tick may
 * have seen it yet), and counts the run as an escape if anything carrying the run's marker is still
 * running. `off` passes no table, so it measures whatever the tree's own code does (the red run
 * on the base commit with `canTrack = false`, today's path on a system without /proc).
 */
import { defaultMonitorConfig } from "../../opencode-monitor/src/config.ts"
import { MonitorManager } from "../../opencode-monitor/src/manager.ts"
import { spawnSync } from "node:child_process"
import { startMonitor } from "./start.ts"
import {
  killWithChildren,
  liveProcesses,
  uniqueMarker,
  waitFor,
} from "../../opencode-monitor/test/support/processes.ts"

/** The escaped process of a run: it runs the shape's final command and is in another group than the leader's. */
function escapee(marker: string, leader: number): number | undefined {
  const ps = spawnSync("ps", ["-eo", "pid=,pgid=,stat=,args="], { encoding: "utf8" })
  for (const row of ps.stdout.split("\n")) {
    const [pid, pgid, stat, ...args] = row.trim().split(/\s+/)
    const command = args.join(" ")
    if (!command.includes(marker) || stat?.startsWith("Z") || Number(pgid) === leader) continue
    if (command.startsWith("sh -c sleep 1000") || command.startsWith("perl -e setpgrp")) return Number(pid)
  }
  return undefined
}

const SHAPES: [string, (marker: string) => string][] = [
  ["setsid", (m) => `setsid sh -c 'sleep 1000; : ${m}'`],
  ["setpgrp", (m) => `perl -e 'setpgrp(0, 0); sleep 1000' ${m}`],
  ["double fork", (m) => `setsid sh -c 'sh -c "sleep 1000; : ${m}" & exit 0'`],
  // No token to find it by: only following the tree stops it.
  ["setsid, environment cleared", (m) => `setsid env -i sh -c 'sleep 1000; : ${m}'`],
]

const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback
const kind = arg("table", "proc")
const runs = Number(arg("runs", "100"))
const jobs = Number(arg("jobs", "4"))
const only = arg("shape", "")

async function main(): Promise<void> {
  const deps: ConstructorParameters<typeof MonitorManager>[1] = { onBatch: () => {} }
  if (kind === "proc" || kind === "ps") {
    const { createProcessTable } = await import("../../opencode-monitor/src/process/process-table.ts")
    deps.processTable = createProcessTable(kind)
  }
  const manager = new MonitorManager(
    { ...defaultMonitorConfig(), kill_grace_ms: 300, max_monitors_per_session: 16 },
    deps,
  )
  const results: Record<string, { escaped: number; runs: number; notSeen: number }> = {}
  for (const [shape, command] of SHAPES.filter(([name]) => !only || name === only)) {
    const result = { escaped: 0, runs: 0, notSeen: 0 }
    results[shape] = result
    const one = async (i: number) => {
      const marker = uniqueMarker(`rate_${shape.replace(/\s/g, "_")}`)
      const info = await startMonitor(manager, {
        sessionID: `s${i % jobs}`,
        directory: process.cwd(),
        command: `${command(marker)} >/dev/null 2>&1 & sleep 1000; : ${marker}`,
      })
      // Wait until the escape happened (a fork of the leader carries the marker before it leaves).
      const leader = manager.snapshot().find((s) => s.id === info.id)?.pid ?? 0
      if (!(await waitFor(() => escapee(marker, leader) !== undefined, 5_000, 5))) result.notSeen++
      await manager.stop(`s${i % jobs}`, info.id, "agent")
      const left = liveProcesses(marker)
      if (left.length > 0) result.escaped++
      for (const row of left) killWithChildren(Number(row.trim().split(/\s+/)[0]))
      result.runs++
    }
    for (let i = 0; i < runs; i += jobs) {
      await Promise.all(Array.from({ length: Math.min(jobs, runs - i) }, (_, k) => one(i + k)))
    }
    console.log(
      `${kind}\t${shape}\tescaped ${result.escaped}/${result.runs}\t(escapee not seen before stop: ${result.notSeen})`,
    )
  }
  await manager.shutdown()
  console.log(JSON.stringify({ table: kind, runs, results }))
}

await main()
process.exit(0)
