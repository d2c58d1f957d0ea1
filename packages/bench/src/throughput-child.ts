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
}

const spec = JSON.parse(process.argv[2] ?? "{}") as ThroughputCase
const options = {
  ...(spec.matchPattern === undefined ? {} : { matchPattern: spec.matchPattern }),
  ...(spec.serverPath ? { serverPath: true } : {}),
  ...(spec.stopAfterMs === undefined ? {} : { stopAfterMs: spec.stopAfterMs }),
  ...(spec.bare ? { bare: true } : {}),
}
const once = (command: string): Promise<RunResult> =>
  spec.mode === "drain" ? drain(command, options) : monitorOnce(command, options)
await once(spec.warmCommand)
const result = await once(spec.command)
process.stdout.write(`THROUGHPUT_RESULT ${JSON.stringify(result)}\n`)
process.exit(0)
