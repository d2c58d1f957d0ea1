import type { ToolContext } from "@opencode-ai/plugin"
import type { MonitorConfig } from "./config"
import type { MonitorInfo, MonitorManager } from "./manager"
import { authorizeCommand } from "./permission/authorize"

export type RestartDeps = {
  config: MonitorConfig
  manager: MonitorManager
  /** As for monitor_start: classify the session before the new process starts. */
  beforeStart: (ctx: ToolContext) => Promise<void>
  /** As for monitor_stop: nothing more of the old monitor is delivered, nobody is woken for it. */
  afterStop: (monitorId: string) => void
}

/**
 * monitor_restart (SPEC §15): the command is judged again under the user's rules exactly as
 * monitor_start judges it (an `ask` rule asks again; a refusal throws and leaves the old monitor
 * running), then the manager stops the old one, waits until its processes are gone and starts
 * the same command with the same options. Undefined when the id is not this session's.
 */
export async function restartMonitor(
  deps: RestartDeps,
  ctx: ToolContext,
  monitorId: string,
): Promise<{ previous: MonitorInfo; started: MonitorInfo } | undefined> {
  const request = deps.manager.requestOf(ctx.sessionID, monitorId)
  const old = deps.manager.get(ctx.sessionID, monitorId)
  if (!request || !old) return undefined
  await authorizeCommand({ command: request.command, label: old.label }, ctx, deps.config)
  await deps.beforeStart(ctx)
  // A running monitor's end is a stop the agent asked for; an ended one's exit notice still goes.
  if (old.status.kind === "running") deps.afterStop(monitorId)
  return deps.manager.restart(ctx.sessionID, monitorId)
}
