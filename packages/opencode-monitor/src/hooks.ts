import type { Hooks } from "@opencode-ai/plugin"
import type { Logger } from "./log"
import type { MonitorInfo } from "./monitor-run"
import { createMonitorTools, type ToolDeps } from "./tools"
import { deadlineText } from "./tools/describe"

/** What the tools need, and what the other hooks report to. */
export type HookParts = ToolDeps & {
  log: Logger
  /** opencode.json's `shell`, from the `config` hook (undefined: $SHELL). */
  setShell: (configured: string | undefined) => void
  dispose: () => Promise<void>
}

/** opencode's hooks, each handed to the part that owns what it reports. */
export function monitorHooks(parts: HookParts): Hooks {
  const { manager, router } = parts
  return {
    tool: createMonitorTools(parts),

    async config(input) {
      // 1.18.33 passes its whole config; the v1 type does not list `shell` yet.
      const value = (input as { shell?: unknown }).shell
      parts.setShell(typeof value === "string" && value !== "" ? value : undefined)
    },

    async event({ event }) {
      const sessionID = sessionOf(event)
      if (!sessionID) return
      if (sessionWentIdle(event)) router.injector.onSessionIdle(sessionID)
      else if (event.type === "session.deleted") {
        router.forgetSession(sessionID)
        // Not awaited: stopping may take kill_grace_ms, and opencode's other events must not wait for it.
        manager
          .stopSession(sessionID)
          .catch((error) =>
            parts.log.error("stopping a deleted session's monitors failed", { sessionID, error: String(error) }),
          )
      }
    },

    async "chat.message"(input, output) {
      // Awaited: opencode stores the message, with this creation time, only after this hook returns.
      const { time } = output.message
      time.created = await router.onChatMessage({ sessionID: input.sessionID, created: time.created }, output.parts, {
        agent: output.message.agent ?? input.agent,
        model: output.message.model ?? input.model,
      })
    },

    async "experimental.session.compacting"(input, output) {
      const running = manager.list(input.sessionID, false)
      if (running.length > 0) output.context.push(compactionContext(running))
    },

    dispose: parts.dispose,
  }
}

function compactionContext(running: readonly MonitorInfo[]): string {
  return [
    "Background monitors (opencode-monitor) still running in this session:",
    ...running.map(
      (m) => `- ${m.id} (${m.label}), started ${new Date(m.startedAt).toISOString()}, deadline: ${deadlineText(m)}`,
    ),
    "Their output keeps arriving as [OMO MONITOR OUTPUT] observations and you are woken when each one exits.",
    "Stop one with monitor_stop {monitor_id}, restart one with monitor_restart {monitor_id}; read retained lines with monitor_output.",
  ].join("\n")
}

function sessionOf(event: { type: string; properties?: unknown }): string | undefined {
  const props = (event.properties ?? {}) as { sessionID?: unknown; info?: { id?: unknown } }
  if (typeof props.sessionID === "string") return props.sessionID
  if (event.type.startsWith("session.") && typeof props.info?.id === "string") return props.info.id
  return undefined
}

/** A session's turn ended: `session.idle`, or `session.status` with status idle (releases send either). */
export function sessionWentIdle(event: { type: string; properties?: unknown }): boolean {
  if (event.type === "session.idle") return true
  const props = (event.properties ?? {}) as { status?: { type?: unknown } }
  return event.type === "session.status" && props.status?.type === "idle"
}
