// A stand-in for the opencode server: runs a MonitorManager with the commands given on the
// command line, prints READY, then idles until it is killed.
import { defaultMonitorConfig } from "../../src/config"
import { MonitorManager } from "../../src/manager"
import { startMonitor } from "./start"

const graceMs = Number(process.argv[2])
const commands = process.argv.slice(3)
const manager = new MonitorManager({ ...defaultMonitorConfig(), kill_grace_ms: graceMs }, { onBatch: () => {} })
for (const command of commands) await startMonitor(manager, { sessionID: "host", directory: process.cwd(), command })
console.log("READY")
setInterval(() => {}, 1_000)
