/**
 * TEST-ONLY plugin entry: the production entry (`packages/opencode-monitor/src/index.ts`) with
 * the process table forced to its `ps` back end, so the live suites prove on Linux what a system
 * without /proc (macOS) runs. Never shipped; no option or environment variable a user could meet.
 */
import type { Plugin, PluginModule } from "@opencode-ai/plugin"
import { parseMonitorConfig } from "../../opencode-monitor/src/config.ts"
import { createSessionApi } from "../../opencode-monitor/src/delivery/session-api.ts"
import { createMonitorPlugin } from "../../opencode-monitor/src/plugin.ts"
import { createProcessTable, serverIdentity } from "../../opencode-monitor/src/process/process-table.ts"

const server: Plugin = async (input, options) => {
  const parsed = parseMonitorConfig(options)
  if (!parsed.ok) throw new Error(parsed.errors.join("; "))
  const api = createSessionApi(input.client)
  const processTable = createProcessTable("ps")
  return createMonitorPlugin(parsed.config, {
    api,
    directory: input.directory,
    processTable,
    server: await serverIdentity(processTable),
  }).hooks
}

const plugin: PluginModule & { id: string } = { id: "opencode-monitor", server }
export default plugin
