import type { Hooks } from "@opencode-ai/plugin"
import type { MonitorConfig } from "./config"
import { MonitorOutputInjector } from "./delivery/injector"
import type { SessionApi } from "./delivery/session-api"
import { classifySession, routeBatch, type SessionSource } from "./delivery/session-source"
import { type MonitorInfo, MonitorManager } from "./manager"
import { resolveShell } from "./process/shell"
import { realScheduler, type Scheduler } from "./scheduler"
import { formatStatus } from "./status"
import { createMonitorTools } from "./tools"

export type HookDeps = {
  api: SessionApi
  scheduler?: Scheduler
  env?: NodeJS.ProcessEnv
}

export type MonitorPluginInstance = {
  hooks: Hooks
  manager: MonitorManager
  injector: MonitorOutputInjector
}

const SHUTDOWN_SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP"] as const

/** Wires process → pipeline → delivery → tools into opencode hooks. */
export function createMonitorPlugin(config: MonitorConfig, deps: HookDeps): MonitorPluginInstance {
  const { api } = deps
  const scheduler = deps.scheduler ?? realScheduler
  const sources = new Map<string, SessionSource>()
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
    },
    {
      api,
      scheduler,
      onGiveUp: (delivery) =>
        api.toast(
          "error",
          "opencode-monitor: wake not delivered",
          `${delivery.label} (${delivery.batch.monitorId}) ended but the session could not be told: ${delivery.lastError ?? "unknown error"}`,
        ),
    },
  )

  const manager = new MonitorManager(config, {
    scheduler,
    env: deps.env,
    shell: currentShell,
    onBatch(batch, monitor) {
      const source = sources.get(monitor.sessionID) ?? { kind: "primary" }
      for (const route of routeBatch(source, monitor.sessionID, batch, config.subagent_wake)) {
        injector.enqueue(batch, route, monitor.label)
      }
    },
    onEnded(monitor) {
      api.log("info", "monitor ended", {
        sessionID: monitor.sessionID,
        monitorId: monitor.id,
        status: formatStatus(monitor.status),
        stoppedBy: monitor.stoppedBy,
      })
      notifyEnded(api, monitor)
    },
  })

  const stopOnSignal = installSignalHandlers(manager)

  const hooks: Hooks = {
    tool: createMonitorTools({
      config,
      manager,
      async beforeStart(ctx) {
        if (!sources.has(ctx.sessionID)) {
          sources.set(ctx.sessionID, await classifySession(api, ctx.sessionID, ctx.agent, config.automation_agents))
        }
      },
      afterStop: (monitorId) => injector.forgetMonitor(monitorId),
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
        sources.delete(sessionID)
        // Not awaited: stopping may take kill_grace_ms, and the event hook must not hold up
        // opencode's delivery of other events meanwhile.
        manager.stopSession(sessionID).catch((error) =>
          api.log("error", "stopping a deleted session's monitors failed", { sessionID, error: String(error) }),
        )
      }
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
      injector.dispose()
      await manager.shutdown()
    },
  }
  return { hooks, manager, injector }
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
