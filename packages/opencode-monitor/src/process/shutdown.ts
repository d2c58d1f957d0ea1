/** What a shutdown signal must stop at once: every process group of one plugin instance. */
export type Terminable = { terminateAllNow(): void }

const SHUTDOWN_SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP"] as const

// One handler per process, whatever the number of plugin instances (one per directory).
const registered = new Set<Terminable>()

function onShutdownSignal(signal: NodeJS.Signals): void {
  for (const owner of registered) owner.terminateAllNow()
  if (process.listenerCount(signal) === 1) {
    // Our listener suppressed the default action: step aside and re-raise (the watchdogs SIGKILL after the grace).
    for (const s of SHUTDOWN_SIGNALS) process.off(s, onShutdownSignal)
    process.kill(process.pid, signal)
  }
}

/** opencode runs no `dispose` on SIGTERM/SIGINT/SIGHUP: the groups are stopped here, the signal acting as before. */
export function stopGroupsOnShutdownSignal(owner: Terminable): () => void {
  if (registered.size === 0) for (const signal of SHUTDOWN_SIGNALS) process.on(signal, onShutdownSignal)
  registered.add(owner)
  return () => {
    registered.delete(owner)
    if (registered.size === 0) for (const signal of SHUTDOWN_SIGNALS) process.off(signal, onShutdownSignal)
  }
}
