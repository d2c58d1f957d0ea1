// A stand-in for the opencode server: runs a MonitorManager with the commands given on the
// command line (after the kill grace and the process-table back end, `proc` or `ps`), prints
// READY, then idles until it is killed. With `--shutdown-signals` before the commands it also
// installs the plugin's SIGTERM/SIGINT/SIGHUP handling, plus a listener of its own that keeps it
// running after such a signal (so what stops the commands is the handler, not the watchdog).
import { defaultMonitorConfig } from "../../src/config"
import { MonitorManager } from "../../src/manager"
import { createProcessTable } from "../../src/process/process-table"
import { stopGroupsOnShutdownSignal } from "../../src/process/shutdown"
import { startMonitor } from "./start"

const graceMs = Number(process.argv[2])
const kind = process.argv[3] === "ps" ? "ps" : "proc"
const shutdownSignals = process.argv[4] === "--shutdown-signals"
const commands = process.argv.slice(shutdownSignals ? 5 : 4)
const manager = new MonitorManager(
  { ...defaultMonitorConfig(), kill_grace_ms: graceMs },
  { onBatch: () => {}, processTable: createProcessTable(kind) },
)
if (shutdownSignals) {
  stopGroupsOnShutdownSignal(manager)
  for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(signal, () => console.log(`GOT ${signal}`))
}
for (const command of commands) await startMonitor(manager, { sessionID: "host", directory: process.cwd(), command })
console.log("READY")
setInterval(() => {}, 1_000)
