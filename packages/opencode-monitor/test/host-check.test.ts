import { afterEach, describe, expect, test } from "bun:test"
import type { PluginInput } from "@opencode-ai/plugin"
import { defaultMonitorConfig } from "../src/config"
import { SERVER_API, serverHostReady, TESTED_TEXT, TUI_API, tuiHostReady } from "../src/host-check"
import plugin from "../src/index"
import { createMonitorPlugin } from "../src/plugin"
import { FakeSessionApi } from "./support/fake-session-api"
import { liveProcesses, uniqueMarker } from "./support/processes"
import { toolContext } from "./support/tool-context"

type Call = { api: string; body: unknown }

/** The plugin input opencode 1.18 hands a server plugin, with `drop` removed from it. */
function serverHost(drop?: readonly string[]) {
  const calls: Call[] = []
  const fn = (api: string) => async (body: unknown) => {
    calls.push({ api, body })
    return { data: {}, error: undefined }
  }
  const input: Record<string, unknown> = {
    directory: process.cwd(),
    worktree: process.cwd(),
    client: {
      session: { promptAsync: fn("promptAsync"), status: fn("status"), messages: fn("messages"), get: fn("get") },
      app: { log: fn("app.log") },
      tui: { showToast: fn("tui.showToast") },
    },
  }
  if (drop) {
    const owner = drop.slice(0, -1).reduce((o, key) => o[key] as Record<string, unknown>, input)
    delete owner[drop[drop.length - 1] as string]
  }
  return { calls, input: input as unknown as PluginInput }
}

/** The TUI plugin API of opencode 1.18 as far as the TUI part uses it, with `drop` removed. */
function tuiHost(drop?: readonly string[]) {
  const calls: Call[] = []
  const fn = (api: string) => (body: unknown) => {
    calls.push({ api, body })
    return () => {}
  }
  const api: Record<string, unknown> = {
    slots: { register: fn("slots.register") },
    ui: {
      dialog: { replace: fn("dialog.replace"), clear: fn("dialog.clear") },
      DialogSelect: fn("DialogSelect"),
      DialogConfirm: fn("DialogConfirm"),
      toast: fn("ui.toast"),
    },
    keymap: { registerLayer: fn("keymap.registerLayer") },
    route: { current: { name: "home" } },
    state: { session: { messages: fn("messages") }, part: fn("part"), path: { directory: process.cwd() } },
    theme: { current: {} },
    lifecycle: { onDispose: fn("onDispose") },
    client: { app: { log: fn("app.log") } },
  }
  if (drop) {
    const owner = drop.slice(0, -1).reduce((o, key) => o[key] as Record<string, unknown>, api)
    delete owner[drop[drop.length - 1] as string]
  }
  return { calls, api }
}

const instances: ReturnType<typeof createMonitorPlugin>[] = []
afterEach(async () => {
  for (const instance of instances.splice(0)) await instance.hooks.dispose?.()
})

describe("the load-time check of opencode's API", () => {
  test("the tested releases are named as a range of opencode 1.x", () => {
    expect(TESTED_TEXT).toBe("opencode 1.18.32–1.18.33")
  })

  test("a host with every API: the plugin registers its tools and says nothing", async () => {
    const { calls, input } = serverHost()
    expect(serverHostReady(input)).toBe(true)
    const hooks = await plugin.server(input, {})
    expect(Object.keys(hooks.tool ?? {})).toContain("monitor_start")
    expect(calls).toEqual([])
    await hooks.dispose?.()
  })

  for (const { api, path } of SERVER_API) {
    test(`a host without ${api}: nothing is registered, and the log and a toast name it and the tested releases`, async () => {
      const { calls, input } = serverHost(path)
      const hooks = await plugin.server(input, {})
      expect(hooks).toEqual({})
      const message =
        `opencode-monitor (server part) is disabled: this opencode lacks ${api}. ` +
        "It is tested on opencode 1.18.32–1.18.33 (opencode 1.x); use one of those releases or a newer 1.x that has it."
      const said = [
        ...(api.startsWith("client.app.log")
          ? []
          : [
              {
                api: "app.log",
                body: { body: { service: "opencode-monitor", level: "error", message, extra: { missing: [api] } } },
              },
            ]),
        ...(api.startsWith("client.tui.showToast")
          ? []
          : [
              {
                api: "tui.showToast",
                body: { body: { title: "opencode-monitor disabled", message, variant: "error" } },
              },
            ]),
      ]
      expect(calls).toEqual(said)
    })
  }

  test("every missing API is named in the one message", async () => {
    const { calls, input } = serverHost(["client", "session"])
    expect(serverHostReady(input)).toBe(false)
    expect(calls).toHaveLength(2)
    expect(JSON.stringify(calls[0])).toContain(
      "lacks client.session.promptAsync (prompts with noReply), client.session.status (session status), " +
        "client.session.messages (message listing), client.session.get (session parent).",
    )
  })

  test("a TUI API with everything: ready, nothing said", () => {
    const { calls, api } = tuiHost()
    expect(tuiHostReady(api)).toBe(true)
    expect(calls).toEqual([])
  })

  for (const { api, path } of TUI_API) {
    test(`a TUI without ${api}: not ready, one toast and one log line name it`, () => {
      const { calls, api: host } = tuiHost(path)
      expect(tuiHostReady(host)).toBe(false)
      const message =
        `opencode-monitor (TUI part) is disabled: this opencode lacks ${api}. ` +
        "It is tested on opencode 1.18.32–1.18.33 (opencode 1.x); use one of those releases or a newer 1.x that has it."
      const toast = api.startsWith("api.ui.toast")
        ? []
        : [{ api: "ui.toast", body: { variant: "error", title: "opencode-monitor disabled", message } }]
      expect(calls).toEqual([
        { api: "app.log", body: { service: "opencode-monitor", level: "error", message, extra: { missing: [api] } } },
        ...toast,
      ])
    })
  }

  test("ctx.ask answering with something that is not a promise (opencode 1.14's Effect) runs nothing", async () => {
    const marker = uniqueMarker("effect-ask")
    const api = new FakeSessionApi(() => Date.now())
    const instance = createMonitorPlugin({ ...defaultMonitorConfig(), kill_grace_ms: 300 }, { api })
    instances.push(instance)
    const ctx = { ...toolContext("ses_a"), ask: () => ({ _tag: "Effect" }) } as never
    await expect(
      instance.hooks.tool?.monitor_start?.execute({ command: `sleep 5; : ${marker}` } as never, ctx),
    ).rejects.toThrow("this opencode lacks ctx.ask answering with a promise. It is tested on opencode 1.18.32–1.18.33")
    // A start the tool made would have spawned before it answered: nothing to wait for.
    expect(liveProcesses(marker)).toEqual([])
    expect(instance.manager.list("ses_a", true)).toEqual([])
  })
})
