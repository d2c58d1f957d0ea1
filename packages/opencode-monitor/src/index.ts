import type { Plugin, PluginModule } from "@opencode-ai/plugin"
import { parseMonitorConfig } from "./config"
import { createSessionApi } from "./delivery/session-api"
import { createMonitorPlugin } from "./plugin"

/** opencode plugin entry: validates the options, then registers the monitor tools and hooks. */
const server: Plugin = async (input, options) => {
  const api = createSessionApi(input.client)
  const parsed = parseMonitorConfig(options)
  if (!parsed.ok) {
    // Refuse to run on a guess: no tools are registered until the options are fixed.
    const message = `opencode-monitor is disabled because of invalid options in opencode.json: ${parsed.errors.join("; ")}`
    api.log("error", message, { errors: parsed.errors })
    api.toast("error", "opencode-monitor disabled", message)
    return {}
  }
  return createMonitorPlugin(parsed.config, { api, directory: input.directory }).hooks
}

const plugin: PluginModule & { id: string } = { id: "opencode-monitor", server }
export default plugin
