// A stand-in for the opencode server: runs a MonitorManager with the commands given on the
// command line (after the kill grace and the process-table back end, `proc` or `ps`), prints
// READY, then idles until it is killed.
import { defaultMonitorConfig } from "../../src/config"
import { MonitorManager } from "../../src/manager"
import { createProcessTable } from "../../src/process/process-table"
import { startMonitor } from "./start"

const graceMs = Number(process.argv[2])
const kind = process.argv[3] === "ps" ? "ps" : "proc"
const commands = process.argv.slice(4)
const manager = new MonitorManager(
  { ...defaultMonitorConfig(), kill_grace_ms: graceMs },
  { onBatch: () => {}, processTable: createProcessTable(kind) },
)
for (const command of commands) await startMonitor(manager, { sessionID: "host", directory: process.cwd(), command })
console.log("READY")
setInterval(() => {}, 1_000)
