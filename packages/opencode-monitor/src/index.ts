import type { Plugin, PluginModule } from "@opencode-ai/plugin"
import { parseMonitorConfig } from "./config"
import { createSessionApi } from "./delivery/session-api"
import { serverHostReady } from "./host-check"
import { createMonitorPlugin } from "./plugin"
import { serverIdentity } from "./process/process-table"
import { withFileTuiSpecNotice } from "./tui-route"

/** opencode plugin entry: validates the options, then registers the monitor tools and hooks. */
const server: Plugin = async (input, options) => {
  // An opencode without an API the plugin relies on: registers nothing, says which.
  if (!serverHostReady(input)) return {}
  const api = createSessionApi(input.client)
  const parsed = parseMonitorConfig(options)
  if (!parsed.ok) {
    // Refuse to run on a guess: no tools are registered until the options are fixed.
    const message = `opencode-monitor is disabled because of invalid options in opencode.json: ${parsed.errors.join("; ")}`
    api.log("error", message, { errors: parsed.errors })
    api.toast("error", "opencode-monitor disabled", message)
    return {}
  }
  return withFileTuiSpecNotice(
    createMonitorPlugin(parsed.config, { api, directory: input.directory, server: await serverIdentity() }).hooks,
    input,
    api,
  )
}

const plugin: PluginModule & { id: string } = { id: "opencode-monitor", server }
export default plugin
