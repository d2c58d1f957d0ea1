import { describe, expect, test } from "bun:test"
import type { PluginInput } from "@opencode-ai/plugin"
import plugin from "../src/index"

/** The few client calls the entry point makes at load, recorded as opencode would receive them. */
function recordingClient() {
  const calls: { api: string; body: unknown }[] = []
  const ok = async (api: string, body: unknown) => {
    calls.push({ api, body })
    return { data: true, error: undefined }
  }
  const client = {
    // Present, never called at load: the load-time check only sees that they are there.
    session: { promptAsync: ok, status: ok, messages: ok, get: ok },
    app: { log: (options: { body: unknown }) => ok("app.log", options.body) },
    tui: { showToast: (options: { body: unknown }) => ok("tui.showToast", options.body) },
  }
  return { calls, client: client as unknown as PluginInput["client"] }
}

const input = (client: PluginInput["client"]) =>
  ({ client, directory: process.cwd(), worktree: process.cwd() }) as PluginInput

describe("the plugin module", () => {
  test("is a path-loadable module: default export with an id and a server function", () => {
    expect(plugin.id).toBe("opencode-monitor")
    expect(typeof plugin.server).toBe("function")
  })

  test("valid options register the five tools and the lifecycle hooks", async () => {
    const { client, calls } = recordingClient()
    const hooks = await plugin.server(input(client), { max_monitors_per_session: 2 })
    expect(Object.keys(hooks.tool ?? {}).sort()).toEqual([
      "monitor_list",
      "monitor_output",
      "monitor_restart",
      "monitor_start",
      "monitor_stop",
    ])
    expect(typeof hooks.event).toBe("function")
    expect(typeof hooks.dispose).toBe("function")
    expect(typeof hooks["experimental.session.compacting"]).toBe("function")
    expect(calls).toEqual([])
    await hooks.dispose?.()
  })

  test('without an options object (`"plugin": ["opencode-monitor"]`) the five tools are registered, nothing said', async () => {
    const { client, calls } = recordingClient()
    const hooks = await plugin.server(input(client), undefined)
    expect(Object.keys(hooks.tool ?? {})).toHaveLength(5)
    expect(calls).toEqual([])
    await hooks.dispose?.()
  })

  test("an invalid option registers no tools, and the log and a toast name the key, the bound and the value", async () => {
    const { client, calls } = recordingClient()
    const hooks = await plugin.server(input(client), { max_monitors_per_session: 99, flush_interval_ms: 5 })
    expect(hooks).toEqual({})
    const message =
      "opencode-monitor is disabled because of invalid options in opencode.json: " +
      "max_monitors_per_session must be <= 16 (got 99); flush_interval_ms must be >= 250 (got 5)"
    expect(calls).toEqual([
      {
        api: "app.log",
        body: {
          service: "opencode-monitor",
          level: "error",
          message,
          extra: {
            errors: ["max_monitors_per_session must be <= 16 (got 99)", "flush_interval_ms must be >= 250 (got 5)"],
          },
        },
      },
      { api: "tui.showToast", body: { title: "opencode-monitor disabled", message, variant: "error" } },
    ])
  })
})
