import type { ToolDefinition } from "@opencode-ai/plugin"
import type { MonitorConfig } from "../config"
import type { DeliveryRouter } from "../delivery/router"
import type { MonitorManager } from "../manager"
import { monitorList } from "./monitor-list"
import { monitorOutput } from "./monitor-output"
import { monitorRestart } from "./monitor-restart"
import { monitorStart } from "./monitor-start"
import { monitorStop } from "./monitor-stop"

export type ToolDeps = {
  config: MonitorConfig
  manager: MonitorManager
  /** Classifies a session before its monitor starts (so its first batch is routed right); forgets a stopped one. */
  router: DeliveryRouter
  /** The shell commands run in, resolved as opencode's bash tool resolves its own. */
  shell: () => string
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
