import type { ToolDefinition } from "@opencode-ai/plugin"
import { monitorList } from "./monitor-list"
import { monitorOutput } from "./monitor-output"
import { monitorRestart } from "./monitor-restart"
import { monitorStart, type StartToolDeps } from "./monitor-start"
import { monitorStop } from "./monitor-stop"

export type ToolDeps = StartToolDeps & {
  /** monitor_stop and monitor_restart: the agent asked for it, so nothing more is delivered and nobody is woken. */
  afterStop: (monitorId: string) => void
}

/** The plugin's tools, one file each (the way opencode keeps its own). */
export function createMonitorTools(deps: ToolDeps): Record<string, ToolDefinition> {
  return {
    monitor_start: monitorStart(deps),
    monitor_stop: monitorStop(deps),
    monitor_restart: monitorRestart(deps),
    monitor_list: monitorList(deps),
    monitor_output: monitorOutput(deps),
  }
}
