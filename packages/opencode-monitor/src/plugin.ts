import type { MonitorConfig } from "./config"
import { latestUserIdentity } from "./delivery/gates"
import { DeliveryRouter } from "./delivery/router"
import type { SessionApi } from "./delivery/session-api"
import { monitorHooks } from "./hooks"
import { namedLogger } from "./log"
import { MonitorManager } from "./manager"
import { notifyEnded } from "./notify"
import { type ProcessIdentity, type ProcessTable, processTable } from "./process/process-table"
import { resolveShell } from "./process/shell"
import { stopGroupsOnShutdownSignal } from "./process/shutdown"
import { realScheduler, type Scheduler } from "./scheduler"
import { projectStateDir } from "./state/format"
import { recoverLostMonitors } from "./state/recovery"
import { watchStopRequests } from "./state/stop-requests"
import { MonitorStateWriter } from "./state/writer"
import { formatStatus } from "./codec"

export type PluginDeps = {
  api: SessionApi
  scheduler?: Scheduler
  env?: NodeJS.ProcessEnv
  /** The project directory; without it no state record is kept and no TUI stop request taken. */
  directory?: string
  /** The process table (process/process-table.ts); this server's (/proc, else ps) when not given. */
  processTable?: ProcessTable
  /** This server, as the entry read it (`serverIdentity`); else its start time is read where cheap (/proc). */
  server?: ProcessIdentity
}

/** Wires process → pipeline → delivery → manager → tools into opencode's hooks (the entry's one job). */
export function createMonitorPlugin(config: MonitorConfig, deps: PluginDeps) {
  const { api } = deps
  const scheduler = deps.scheduler ?? realScheduler
  const router = new DeliveryRouter(config, { api, scheduler })
  // The bash tool's shell: opencode.json's `shell` (from the `config` hook) or $SHELL, resolved once.
  let configuredShell: string | undefined
  let shell: string | undefined
  const currentShell = () => (shell ??= resolveShell(configuredShell, { env: deps.env }))
  let writer: MonitorStateWriter | undefined
  const manager = createManager(config, {
    ...deps,
    scheduler,
    router,
    shell: currentShell,
    changed: () => writer?.changed(),
  })
  const wiring = deps.directory !== undefined && { ...deps, directory: deps.directory, scheduler, manager, router }
  writer = wiring ? keepStateRecord(config, wiring) : undefined
  const stopWatching = wiring ? takeStopRequests(wiring) : () => {}
  const stopOnSignal = stopGroupsOnShutdownSignal(manager)
  const hooks = monitorHooks({
    config,
    manager,
    router,
    log: namedLogger(api, "hooks"),
    shell: currentShell,
    setShell(configured) {
      configuredShell = configured
      shell = undefined
    },
    async dispose() {
      stopOnSignal()
      stopWatching()
      router.dispose()
      await manager.shutdown()
      writer?.dispose()
    },
  })
  return { hooks, manager, router }
}

/** The manager, its batches handed to the router, its ends logged and told to the person. */
function createManager(
  config: MonitorConfig,
  deps: PluginDeps & { scheduler: Scheduler; router: DeliveryRouter; shell: () => string; changed: () => void },
): MonitorManager {
  const { api, router } = deps
  const log = namedLogger(api, "plugin")
  return new MonitorManager(config, {
    scheduler: deps.scheduler,
    env: deps.env,
    shell: deps.shell,
    processTable: deps.processTable,
    matchWakeLeft: (monitorId, wakeLimit) => router.injector.matchWakeLeft(monitorId, wakeLimit),
    onStarted: deps.changed,
    onBatch: (batch, monitor) =>
      router.route(batch, {
        sessionID: monitor.sessionID,
        label: monitor.label,
        hasPattern: monitor.pattern !== undefined,
        wakeLimit: monitor.wakeLimit,
      }),
    onError: (monitorId, error) =>
      log.error("a monitor callback failed; other monitors are unaffected", { monitorId, error: String(error) }),
    onEnded(monitor, end) {
      log.info("monitor ended", {
        sessionID: monitor.sessionID,
        ...end,
        status: formatStatus(monitor.status),
        ending: monitor.ending,
      })
      notifyEnded(api, monitor)
      deps.changed()
    },
  })
}

type Wiring = PluginDeps & { directory: string; scheduler: Scheduler; manager: MonitorManager; router: DeliveryRouter }

/**
 * The on-disk record of this server's monitors, and the report of the monitors a
 * dead server of this project left behind, which runs once as the plugin loads.
 */
function keepStateRecord(config: MonitorConfig, deps: Wiring): MonitorStateWriter {
  const { api, scheduler, manager, router } = deps
  const log = namedLogger(api, "state")
  const table = deps.processTable ?? processTable
  const server = deps.server ?? { pid: process.pid, pidStartTime: table.cheap?.read([process.pid])[0]?.start }
  const writer = new MonitorStateWriter({
    directory: deps.directory,
    source: () => manager.snapshot(),
    scheduler,
    log,
    env: deps.env,
    wakePending: (monitor) => router.exitNoticeOwed(monitor),
    server,
  })
  // Not awaited: the plugin must load at once; the notices go through the normal gates.
  recoverLostMonitors({
    directory: deps.directory,
    env: deps.env,
    table: deps.processTable,
    self: server,
    api,
    killGraceMs: config.kill_grace_ms,
    async deliver(batch, label, sessionID, history) {
      await router.sources.learn(sessionID, latestUserIdentity(history)?.agent)
      router.route(batch, { sessionID, label, hasPattern: false, wakeLimit: 0 })
    },
    whenDelivered: (monitors) =>
      waitFor(scheduler, config.pending_retry_ms, () => !monitors.some((m) => router.exitNoticeOwed(m))),
  }).catch((error) => log.error("restart recovery failed", { error: String(error) }))
  return writer
}

/** A person's stop from the TUI: the stop requests addressed to this instance's monitors. */
function takeStopRequests(deps: Wiring): () => void {
  const { manager } = deps
  const log = namedLogger(deps.api, "stop-requests")
  return watchStopRequests(projectStateDir(deps.directory, deps.env), {
    serverPid: process.pid,
    scheduler: deps.scheduler,
    owns: (sessionID, monitorId) => manager.get(sessionID, monitorId) !== undefined,
    stop(sessionID, monitorId) {
      if (manager.get(sessionID, monitorId)?.status.kind !== "running") return
      log.info("monitor stop requested by the person at the screen", { sessionID, monitorId })
      manager
        .stop(sessionID, monitorId, "person")
        .catch((error) =>
          log.error("stopping a monitor for the person failed", { sessionID, monitorId, error: String(error) }),
        )
    },
    onError: (message) => log.warn(message),
  })
}

/** Resolves once `done()` holds, checking every `everyMs` on the injected clock. */
function waitFor(scheduler: Scheduler, everyMs: number, done: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const check = () => (done() ? resolve() : scheduler.setTimeout(check, everyMs))
    check()
  })
}
