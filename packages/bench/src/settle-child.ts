/**
 * One series of match wakes in a fresh process (OMO_SRC picks the build): the producer prints
 * `WAKE <n>` episodes while one monitor with `wake_pattern: WAKE` (default options otherwise) reads
 * it through MonitorManager; every batch's time is recorded as it leaves the pipeline (onBatch).
 * Usage: bun settle-child.ts <episodes> <burstMs> <gapMs>; prints one line `SETTLE_RESULT {json}`.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { PLUGIN_SRC, runMonitors } from "./harness.ts"
import { shellQuote } from "./streams.ts"

const PRODUCER = fileURLToPath(new URL("./settle-producer.ts", import.meta.url))

export type SettleResult = {
  /** When each match was printed (ms on the shared clock: timeOrigin + now). */
  printedAt: number[]
  /** When each batch left the pipeline, on the same clock; the terminal batch is the last. */
  batchAt: number[]
  /** The build's `wake_settle_ms` default; null when the build has none. */
  wakeSettleMs: number | null
  stallMaxGapMs: number
}

const [episodes, burstMs, gapMs] = process.argv.slice(2)
if (episodes === undefined || burstMs === undefined || gapMs === undefined)
  throw new Error("usage: settle-child.ts <episodes> <burstMs> <gapMs>")
const dir = mkdtempSync(join(tmpdir(), "bench-settle-"))
const timesFile = join(dir, "printed.json")
const command = [process.execPath, PRODUCER, episodes, burstMs, gapMs, timesFile].map(shellQuote).join(" ")
// Compiles the pipeline's wake path before the measured series.
await runMonitors(["printf 'WAKE 0\\nafter\\n'"], { wakePattern: "WAKE" })
const run = await runMonitors([command], { wakePattern: "WAKE", traceBatches: true })
const config = (await import(join(PLUGIN_SRC, "config.ts"))) as { defaultMonitorConfig(): { wake_settle_ms?: number } }
const result: SettleResult = {
  printedAt: JSON.parse(readFileSync(timesFile, "utf8")) as number[],
  batchAt: (run.monitors[0]?.batchTimes ?? []).map((t) => performance.timeOrigin + t),
  wakeSettleMs: config.defaultMonitorConfig().wake_settle_ms ?? null,
  stallMaxGapMs: run.stall.maxGapMs,
}
rmSync(dir, { recursive: true, force: true })
process.stdout.write(`SETTLE_RESULT ${JSON.stringify(result)}\n`)
process.exit(0)
