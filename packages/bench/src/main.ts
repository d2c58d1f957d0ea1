/**
 * `npm run bench` (add `--quick` for a short smoke run; `--only=throughput,memory,regex,concurrent,permission,live,load,exitwake,wake,state,budget,silence,table,share,settle`
 * to run a subset; `--before=<another build's packages/opencode-monitor/src>` to measure it beside this
 * one). Prints machine info and a markdown table; writes results/latest.json.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { benchBudget } from "./budget.ts"
import { benchConcurrent } from "./concurrent.ts"
import { benchLive, benchLoadCost, benchWakeLatency } from "./live.ts"
import { machineInfo } from "./machine.ts"
import { benchMemory } from "./memory.ts"
import { benchPermission } from "./permission.ts"
import { benchProcessTable } from "./process-table.ts"
import { log, makePlan, type Plan } from "./plan.ts"
import { benchRegex } from "./regex.ts"
import { benchSettle } from "./settle.ts"
import { benchShare } from "./share.ts"
import { benchSilence } from "./silence.ts"
import { markdownTable, type Row } from "./report.ts"
import { STALL_INTERVAL_MS } from "./stall-meter.ts"
import { benchState } from "./state.ts"
import { benchThroughput } from "./throughput.ts"
import { benchWake } from "./wake.ts"

const BENCHES: Record<string, (plan: Plan) => Promise<Row[]>> = {
  throughput: benchThroughput,
  memory: benchMemory,
  regex: benchRegex,
  concurrent: benchConcurrent,
  permission: benchPermission,
  live: benchLive,
  /** The load-cost rows of `live` alone. */
  load: benchLoadCost,
  /** The exit → wake latency rows of `live` alone (with `--before`: that build on a second server). */
  exitwake: benchWakeLatency,
  wake: benchWake,
  state: benchState,
  budget: benchBudget,
  silence: benchSilence,
  table: benchProcessTable,
  share: benchShare,
  settle: benchSettle,
}

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  const quick = args.includes("--quick")
  const only = args
    .find((a) => a.startsWith("--only="))
    ?.slice("--only=".length)
    .split(",")
  const unknown = (only ?? []).filter((name) => !(name in BENCHES))
  if (unknown.length > 0)
    throw new Error(`unknown benchmark(s) ${unknown.join(", ")}; known: ${Object.keys(BENCHES).join(", ")}`)
  const before = args.find((a) => a.startsWith("--before="))?.slice("--before=".length)
  const plan = makePlan(quick, before)
  const machine = machineInfo()
  const startedAt = new Date()
  const header = [
    `# opencode-monitor benchmarks${quick ? " (--quick)" : ""}`,
    "",
    `- date: ${startedAt.toISOString()}`,
    `- machine: ${machine.cpu}, ${machine.cores} cores, ${machine.ramGB} GB RAM, ${machine.os}`,
    `- runtime: Bun ${machine.bun}`,
    `- every figure is the median of ${plan.reps} runs; ratios are against a baseline measured in the same run`,
    `- stall: longest gap between firings of a ${STALL_INTERVAL_MS} ms setInterval in the process running the pipeline`,
  ].join("\n")
  process.stdout.write(`${header}\n\n`)

  const rows: Row[] = []
  const errors: string[] = []
  for (const [name, bench] of Object.entries(BENCHES)) {
    // `load` and `exitwake` are parts of `live`, run on their own only when named.
    if (only ? !only.includes(name) : name === "load" || name === "exitwake") continue
    const t = performance.now()
    try {
      rows.push(...(await bench(plan)))
    } catch (error) {
      const message = error instanceof Error ? (error.stack ?? error.message) : String(error)
      errors.push(`${name}: ${message}`)
      log(`${name} FAILED: ${message}`)
    }
    log(`${name} done in ${((performance.now() - t) / 1000).toFixed(1)} s`)
  }
  const totalSeconds = (Date.now() - startedAt.getTime()) / 1000
  const table = markdownTable(rows)
  process.stdout.write(`${table}\n\ntotal time: ${totalSeconds.toFixed(0)} s\n`)
  if (errors.length > 0) process.stdout.write(`\nFAILED:\n${errors.map((e) => `- ${e}`).join("\n")}\n`)

  const resultsDir = join(dirname(fileURLToPath(import.meta.url)), "..", "results")
  mkdirSync(resultsDir, { recursive: true })
  // Only a full run replaces latest.json, the figures BENCHMARKS.md records.
  const file = join(resultsDir, `latest${quick ? "-quick" : ""}${only ? `-${only.join("-")}` : ""}.json`)
  writeFileSync(
    file,
    `${JSON.stringify({ date: startedAt.toISOString(), quick, machine, plan, totalSeconds, rows, errors, markdown: table }, null, 2)}\n`,
  )
  log(`results written to ${file}`)
  process.exit(errors.length > 0 ? 1 : 0)
}

await main()
