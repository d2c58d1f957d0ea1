// bun probe2.ts <drain|pipeline> <bytes> <loadParser 0|1> [ballast MB]
import { drain, sleep } from "../packages/bench/src/harness.ts"
import { parseSimpleCommands } from "../packages/opencode-monitor/src/permission/bash-parser.ts"
const [mode, b, lp, ballastMB] = process.argv.slice(2)
const cmd = `yes "$(printf '%0100d' 0)" | head -c ${Number(b)}`
const MB = 2 ** 20
if (lp === "1") await parseSimpleCommands("echo hi")
const ballast = ballastMB ? new ArrayBuffer(Number(ballastMB) * MB) : undefined
await drain("printf 'warm\\n'")
Bun.gc(true); await sleep(200)
const idle = process.memoryUsage().rss
let peak = 0
const t = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss) }, 10)
await drain(cmd)
clearInterval(t)
peak = Math.max(peak, process.memoryUsage().rss)
console.log(mode, b, "parser", lp, "ballast", ballastMB ?? 0, `idle=${(idle / MB).toFixed(0)} growth=${((peak - idle) / MB).toFixed(0)}`, ballast ? "" : "")
