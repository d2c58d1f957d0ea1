/**
 * One throughput measurement in a fresh process (a warm-up run first, not measured), so runs cannot
 * pollute each other and another build can be measured in the same run (OMO_SRC, see harness.ts).
 * Usage: bun throughput-child.ts '<json ThroughputCase>'; prints one line `THROUGHPUT_RESULT {json}`.
 */
import { drain, monitorOnce, type RunResult } from "./harness.ts"

export type ThroughputCase = {
  mode: "drain" | "monitor"
  command: string
  /** Run first, unmeasured, to warm the JIT and the page cache (for a flood: the same stream). */
  warmCommand: string
  matchPattern?: string
  serverPath?: boolean
  stopAfterMs?: number
  /** A drain that counts bytes only (see `drain`). */
  bare?: boolean
  /** A monitor's `output_cpu_share` other than the default. */
  outputCpuShare?: number
}

const spec = JSON.parse(process.argv[2] ?? "{}") as ThroughputCase
const options = {
  ...(spec.matchPattern === undefined ? {} : { matchPattern: spec.matchPattern }),
  ...(spec.serverPath ? { serverPath: true } : {}),
  ...(spec.stopAfterMs === undefined ? {} : { stopAfterMs: spec.stopAfterMs }),
  ...(spec.bare ? { bare: true } : {}),
  ...(spec.outputCpuShare === undefined ? {} : { outputCpuShare: spec.outputCpuShare }),
}
const once = (command: string): Promise<RunResult> =>
  spec.mode === "drain" ? drain(command, options) : monitorOnce(command, options)
// The warm-up only has to compile the hot code: it runs with the share cap off (in a build that has
// one), so a flood held to a quarter of a core does not pay its wall time twice.
const warm = (command: string): Promise<RunResult> =>
  spec.mode === "drain" ? drain(command, options) : monitorOnce(command, { ...options, outputCpuShare: 1 })
await warm(spec.warmCommand)
const result = await once(spec.command)
process.stdout.write(`THROUGHPUT_RESULT ${JSON.stringify(result)}\n`)
process.exit(0)
