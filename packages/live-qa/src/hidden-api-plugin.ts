/**
 * TEST-ONLY plugin entry: the real opencode-monitor entry (`src/index.ts`) given opencode's plugin
 * input with one client call removed, as an opencode release without that API would hand it over.
 * Never shipped. Options: `{ hide: "<group>.<call>" }` (e.g. `"session.status"`), the rest go to the plugin.
 */
import type { Plugin, PluginInput, PluginModule } from "@opencode-ai/plugin"
import monitor from "../../opencode-monitor/src/index.ts"

const server: Plugin = async (input, options) => {
  const { hide, ...rest } = (options ?? {}) as { hide?: string }
  const [group, call] = String(hide).split(".") as [string, string]
  const client = input.client as unknown as Record<string, Record<string, unknown>>
  // The SDK's groups are class instances: a plain copy of the group keeps every other call bound.
  const original = client[group] ?? {}
  const copy: Record<string, unknown> = {}
  for (const key of Object.getOwnPropertyNames(Object.getPrototypeOf(original)).concat(Object.keys(original))) {
    const value = (original as Record<string, unknown>)[key]
    if (key !== "constructor" && key !== call) copy[key] = typeof value === "function" ? value.bind(original) : value
  }
  const hidden = new Proxy(client, { get: (target, key) => (key === group ? copy : Reflect.get(target, key)) })
  return monitor.server({ ...input, client: hidden as unknown as PluginInput["client"] }, rest)
}

const plugin: PluginModule & { id: string } = { id: "opencode-monitor-hidden-api", server }
export default plugin
