import type { Hooks } from "@opencode-ai/plugin"
import type { MonitorConfig } from "./config"
import { isRealUserTurn, ObservationBudget } from "./delivery/budget"
import { latestUserIdentity } from "./delivery/gates"
import { MonitorOutputInjector } from "./delivery/injector"
import type { SessionApi } from "./delivery/session-api"
import { routeBatch, type SessionSource, SessionSources } from "./delivery/session-source"
import { type MonitorInfo, MonitorManager } from "./manager"
import type { OutputBatch } from "./pipeline/batcher"
import { type ProcessTable, processStartTime } from "./process/process-table"
import { resolveShell } from "./process/shell"
import { realScheduler, type Scheduler } from "./scheduler"
import { projectStateDir, STATE_LAST_LINES } from "./state/format"
import { recoverLostMonitors } from "./state/recovery"
import { watchStopRequests } from "./state/stop-requests"
import { MonitorStateWriter } from "./state/writer"
import { formatStatus } from "./status"
import { createMonitorTools } from "./tools"

export type HookDeps = {
  api: SessionApi
  scheduler?: Scheduler
  env?: NodeJS.ProcessEnv
  /**
   * The plugin instance's project directory; without it no state record is kept and no stop
   * request from the TUI part is taken.
   */
  directory?: string
  /** The process table (process/process-table.ts); this server's (/proc, else ps) when not given. */
  processTable?: ProcessTable
}

export type MonitorPluginInstance = {
  hooks: Hooks
  manager: MonitorManager
  budget: ObservationBudget
  injector: MonitorOutputInjector
}

const SHUTDOWN_SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP"] as const

/** Wires process → pipeline → delivery → tools into opencode hooks. */
export function createMonitorPlugin(config: MonitorConfig, deps: HookDeps): MonitorPluginInstance {
  const { api } = deps
  const scheduler = deps.scheduler ?? realScheduler
  const sources = new SessionSources(api, config.automation_agents, { scheduler, delayMs: config.pending_retry_ms })
  // The bash tool's shell: opencode.json's `shell` (from the `config` hook) or $SHELL, resolved once.
  let configuredShell: string | undefined
  let shell: string | undefined
  const currentShell = () => (shell ??= resolveShell(configuredShell, { env: deps.env }))

  const injector = new MonitorOutputInjector(
    {
      userMessageWindowMs: config.user_message_window_ms,
      pendingRetryMs: config.pending_retry_ms,
      postDispatchHoldMs: config.post_dispatch_hold_ms,
      acceptedMessageSkewMs: config.accepted_message_skew_ms,
      maxActiveDeferMs: config.max_active_defer_ms,
      // At most two batches' worth of streaming output waits per monitor while a session is busy.
      pendingMaxLines: 2 * config.batch_max_lines,
      pendingMaxBytes: 2 * config.batch_max_bytes,
      matchWake: { minIntervalMs: config.wake_min_interval_ms, perSessionPerMinute: config.max_match_wakes_per_minute },
      // No turn of this server started before its plugin loaded: older unfinished ones are a crash's.
      staleTurnsBefore: scheduler.now(),
    },
    {
      api,
      scheduler,
      onGiveUp: (delivery) =>
        api.toast(
          "error",
          "opencode-monitor: wake not delivered",
          `${delivery.label} (${delivery.batch.monitorId}) ${delivery.batch.stillRunning ? "printed a wake_pattern line" : "ended"}, but session ${delivery.sessionID} could not be told for 30 minutes: ${delivery.lastError ?? "unknown error"}. Ask the agent to run monitor_list.`,
        ),
    },
  )

  const budget = new ObservationBudget(
    {
      bytesPerMinute: config.observation_bytes_per_minute,
      burstBytes: config.observation_burst_bytes,
      sessionBytes: config.observation_session_bytes,
      summaryIntervalMs: config.observation_summary_interval_ms,
    },
    {
      scheduler,
      forward: (batch, route, label, wakeLimit) => injector.enqueue(batch, route, label, wakeLimit),
      matchWakeLeft: (monitorId, wakeLimit) => injector.matchWakeLeft(monitorId, wakeLimit),
    },
  )

  /** Routes a batch by its session's source (SPEC §5), through the observation budget. */
  const enqueueRouted = (batch: OutputBatch, sessionID: string, label: string, hasPattern = false, wakeLimit = 0) => {
    const deliver = (source: SessionSource) => {
      for (const route of routeBatch(source, sessionID, batch, config.subagent_wake))
        budget.admit(batch, route, label, hasPattern, wakeLimit)
    }
    const known = sources.cached(sessionID)
    // Streaming batches go to the owning session whatever its source; only the exit notice
    // waits for a classification that failed at start.
    if (known || batch.stillRunning) return deliver(known ?? { kind: "primary" })
    sources
      .sourceOf(sessionID)
      .then(deliver)
      .catch((error) =>
        api.log("error", "routing a monitor's exit notice failed", {
          monitorId: batch.monitorId,
          error: String(error),
        }),
      )
  }
  /** The monitor's exit notice still waits in a delivery queue (its own session's, or its root's). */
  const exitNoticeQueued = ({ id, sessionID }: { id: string; sessionID: string }) => {
    const source = sources.cached(sessionID)
    const targets = source?.kind === "subagent" ? [sessionID, source.rootID] : [sessionID]
    return targets.some((target) =>
      injector.pending(target).some((d) => d.batch.monitorId === id && !d.batch.stillRunning),
    )
  }
  const manager = new MonitorManager(config, {
    scheduler,
    env: deps.env,
    onStarted: () => writer?.changed(),
    shell: currentShell,
    processTable: deps.processTable,
    onBatch(batch, monitor) {
      enqueueRouted(batch, monitor.sessionID, monitor.label, monitor.pattern !== undefined, monitor.wakeLimit)
    },
    onError(monitorId, error) {
      api.log("error", "a monitor callback failed; other monitors are unaffected", { monitorId, error: String(error) })
    },
    onEnded(monitor) {
      api.log("info", "monitor ended", {
        sessionID: monitor.sessionID,
        monitorId: monitor.id,
        status: formatStatus(monitor.status),
        stoppedBy: monitor.stoppedBy,
      })
      notifyEnded(api, monitor)
      writer?.changed()
    },
  })
  const writer = deps.directory
    ? keepStateRecord(config, {
        ...deps,
        directory: deps.directory,
        scheduler,
        manager,
        sources,
        enqueueRouted,
        exitNoticeQueued,
      })
    : undefined

  const stopOnSignal = installSignalHandlers(manager)
  const stopWatching = deps.directory
    ? watchStopRequests(projectStateDir(deps.directory, deps.env), {
        serverPid: process.pid,
        owns: (sessionID, monitorId) => manager.get(sessionID, monitorId) !== undefined,
        stop(sessionID, monitorId) {
          if (manager.get(sessionID, monitorId)?.status.kind !== "running") return
          api.log("info", "monitor stop requested by the person at the screen", { sessionID, monitorId })
          manager.stop(sessionID, monitorId, "person").catch((error) =>
            api.log("error", "stopping a monitor for the person failed", {
              sessionID,
              monitorId,
              error: String(error),
            }),
          )
        },
        onError: (message) => api.log("warn", `opencode-monitor: ${message}`, {}),
      })
    : () => {}

  const hooks: Hooks = {
    tool: createMonitorTools({
      config,
      manager,
      beforeStart: (ctx) => sources.learn(ctx.sessionID, ctx.agent),
      exitNote: (sessionID) => exitNote(sources.cached(sessionID), config.subagent_wake),
      afterStop: (monitorId) => {
        budget.forgetMonitor(monitorId)
        injector.forgetMonitor(monitorId)
      },
      shell: currentShell,
    }),

    async config(input) {
      // 1.18.33 passes its whole config; the v1 type does not list `shell` yet.
      const value = (input as { shell?: unknown }).shell
      configuredShell = typeof value === "string" && value !== "" ? value : undefined
      shell = undefined
    },

    async event({ event }) {
      const sessionID = sessionOf(event)
      if (!sessionID) return
      if (event.type === "session.idle") injector.onSessionIdle(sessionID)
      else if (event.type === "session.status" && statusType(event) === "idle") injector.onSessionIdle(sessionID)
      else if (event.type === "session.deleted") {
        injector.forgetSession(sessionID)
        budget.forgetSession(sessionID)
        sources.forget(sessionID)
        // Not awaited: stopping may take kill_grace_ms, and the event hook must not hold up
        // opencode's delivery of other events meanwhile.
        manager
          .stopSession(sessionID)
          .catch((error) =>
            api.log("error", "stopping a deleted session's monitors failed", { sessionID, error: String(error) }),
          )
      }
    },

    // A person's message: it resets the session's observation budget, and its agent and model are
    // kept for every wake. Injected (synthetic) prompts, ours included, do neither.
    async "chat.message"(input, output) {
      if (isRealUserTurn(output.parts)) budget.onUserTurn(input.sessionID)
      const texts = output.parts.filter((p) => p.type === "text")
      if (texts.length > 0 && texts.every((p) => p.synthetic === true)) return
      injector.identities.remember(input.sessionID, {
        agent: output.message.agent ?? input.agent,
        model: output.message.model ?? input.model,
      })
    },

    async "experimental.session.compacting"(input, output) {
      const running = manager.list(input.sessionID, false)
      if (running.length === 0) return
      output.context.push(
        [
          "Background monitors (opencode-monitor) still running in this session:",
          ...running.map((m) => `- ${m.id} (${m.label}), started ${new Date(m.startedAt).toISOString()}`),
          "Their output keeps arriving as [OMO MONITOR OUTPUT] observations and you are woken when each one exits.",
          "Stop one with monitor_stop {monitor_id}; read retained lines with monitor_output.",
        ].join("\n"),
      )
    },

    async dispose() {
      stopOnSignal()
      stopWatching()
      budget.dispose()
      injector.dispose()
      await manager.shutdown()
      writer?.dispose()
    },
  }
  return { hooks, manager, budget, injector }
}

type StateRecordDeps = HookDeps & {
  directory: string
  scheduler: Scheduler
  manager: MonitorManager
  sources: SessionSources
  enqueueRouted: (batch: OutputBatch, sessionID: string, label: string) => void
  exitNoticeQueued: (monitor: { id: string; sessionID: string }) => boolean
}

/**
 * The on-disk record of this server's monitors (SPEC §11, §12), and the report of the monitors a
 * dead server of this project left behind, which runs once as the plugin loads.
 */
function keepStateRecord(config: MonitorConfig, deps: StateRecordDeps): MonitorStateWriter {
  const { api, scheduler, manager } = deps
  const writer = new MonitorStateWriter({
    directory: deps.directory,
    source: () => manager.snapshot(STATE_LAST_LINES),
    scheduler,
    log: (level, message, extra) => api.log(level, message, extra),
    env: deps.env,
    wakePending: deps.exitNoticeQueued,
    ...(deps.processTable && {
      server: { pid: process.pid, pidStartTime: processStartTime(process.pid, deps.processTable) },
      startTimeOf: (pid: number) => processStartTime(pid, deps.processTable),
    }),
  })
  // Not awaited: the plugin must load at once; the notices go through the normal gates.
  recoverLostMonitors({
    directory: deps.directory,
    env: deps.env,
    table: deps.processTable,
    api,
    killGraceMs: config.kill_grace_ms,
    async deliver(batch, label, sessionID, history) {
      await deps.sources.learn(sessionID, latestUserIdentity(history)?.agent)
      deps.enqueueRouted(batch, sessionID, label)
    },
    whenDelivered: (monitors) =>
      waitFor(scheduler, config.pending_retry_ms, () => !monitors.some(deps.exitNoticeQueued)),
  }).catch((error) => api.log("error", "restart recovery failed", { error: String(error) }))
  return writer
}

/** Resolves once `done()` holds, checking every `everyMs` on the injected clock. */
function waitFor(scheduler: Scheduler, everyMs: number, done: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const check = () => (done() ? resolve() : scheduler.setTimeout(check, everyMs))
    check()
  })
}

/** Where a monitor's exit notice goes (SPEC §5), said to the agent that starts it. */
function exitNote(source: SessionSource | undefined, subagentWake: MonitorConfig["subagent_wake"]): string {
  if (source?.kind === "subagent") {
    return subagentWake === "parent"
      ? `this is a subagent session, so when the command ends its exit status wakes the root session (${source.rootID}), not this one.`
      : "this is a subagent session: the exit status arrives here as an observation too, and nobody is woken."
  }
  if (source?.kind === "automation")
    return "the exit status arrives as an observation too (automation sessions are never woken)."
  return "you will be woken with the exit status when it ends."
}

function notifyEnded(api: SessionApi, monitor: MonitorInfo): void {
  if (monitor.stoppedBy === "session" || monitor.stoppedBy === "shutdown") return
  const status = formatStatus(monitor.status)
  const variant =
    monitor.status.kind === "timed_out"
      ? "warning"
      : monitor.status.kind === "exited" && monitor.status.code === 0
        ? "success"
        : monitor.status.kind === "stopped"
          ? "info"
          : "error"
  api.toast(variant, `monitor ${monitor.label}`, `${monitor.label} (${monitor.id}) ${status}`)
}

// One handler per process, whatever the number of plugin instances (one per directory).
const signalled = new Set<MonitorManager>()

function onShutdownSignal(signal: NodeJS.Signals): void {
  for (const manager of signalled) manager.terminateAllNow()
  if (process.listenerCount(signal) === 1) {
    // We were the only listener, so our presence suppressed the default action: step aside and
    // re-raise, and the server dies as it would have. The watchdogs send SIGKILL after the grace.
    for (const s of SHUTDOWN_SIGNALS) process.off(s, onShutdownSignal)
    process.kill(process.pid, signal)
  }
}

/**
 * opencode runs no plugin `dispose` on SIGTERM/SIGINT/SIGHUP, so the plugin stops its process
 * groups itself, without changing how the server reacts to the signal.
 */
function installSignalHandlers(manager: MonitorManager): () => void {
  if (signalled.size === 0) for (const signal of SHUTDOWN_SIGNALS) process.on(signal, onShutdownSignal)
  signalled.add(manager)
  return () => {
    signalled.delete(manager)
    if (signalled.size === 0) for (const signal of SHUTDOWN_SIGNALS) process.off(signal, onShutdownSignal)
  }
}

function sessionOf(event: { type: string; properties?: unknown }): string | undefined {
  const props = (event.properties ?? {}) as { sessionID?: unknown; info?: { id?: unknown } }
  if (typeof props.sessionID === "string") return props.sessionID
  if (event.type.startsWith("session.") && typeof props.info?.id === "string") return props.info.id
  return undefined
}

function statusType(event: { properties?: unknown }): string | undefined {
  const props = (event.properties ?? {}) as { status?: { type?: unknown } }
  return typeof props.status?.type === "string" ? props.status.type : undefined
}
