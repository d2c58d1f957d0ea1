import { describe, expect, test } from "bun:test"
import type { PluginInput } from "@opencode-ai/plugin"
import { defaultMonitorConfig } from "../src/config"
import { createSessionApi } from "../src/delivery/session-api"
import { namedLogger } from "../src/log"
import { createMonitorPlugin } from "../src/plugin"
import { drive } from "./support/drive"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi } from "./support/fake-session-api"
import { toolContext } from "./support/tool-context"

describe("named loggers", () => {
  test("a module's line reaches opencode's app.log with the module's service name", () => {
    const bodies: unknown[] = []
    const client = { app: { log: async (options: { body: unknown }) => bodies.push(options.body) } }
    const api = createSessionApi(client as unknown as PluginInput["client"])
    namedLogger(api, "injector").warn("monitor output send failed; will retry", { monitorId: "mon_1" })
    api.log("error", "opencode-monitor is disabled", {})
    expect(bodies).toEqual([
      {
        service: "opencode-monitor.injector",
        level: "warn",
        message: "monitor output send failed; will retry",
        extra: { monitorId: "mon_1" },
      },
      { service: "opencode-monitor", level: "error", message: "opencode-monitor is disabled", extra: {} },
    ])
  })

  test("in the plugin, each line names the module that wrote it", async () => {
    const scheduler = new FakeScheduler()
    const api = new FakeSessionApi(() => scheduler.now())
    const instance = createMonitorPlugin(defaultMonitorConfig(), { api, scheduler })
    await instance.hooks.tool?.monitor_start?.execute({ command: "exit 3" } as never, toolContext("ses_a"))
    await drive(scheduler, undefined, { until: () => api.logs.some((l) => l.message === "sent monitor output") })
    const serviceOf = (message: string) => api.logs.find((l) => l.message === message)?.service
    expect(serviceOf("monitor ended")).toBe("opencode-monitor.plugin")
    expect(serviceOf("sent monitor output")).toBe("opencode-monitor.injector")
    await instance.hooks.dispose?.()
  })
})
