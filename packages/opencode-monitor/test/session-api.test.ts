import { describe, expect, test } from "bun:test"
import type { PluginInput } from "@opencode-ai/plugin"
import { createSessionApi } from "../src/delivery/session-api"

/** A completed tool call of `tool` whose result's metadata names `monitorId`, as opencode stores it. */
const toolPart = (tool: string, monitorId: string, status = "completed") => ({
  type: "tool",
  tool,
  state: { status, input: {}, output: "", metadata: { monitorId }, time: { start: 1, end: 2 } },
})

describe("session history as the plugin reads it", () => {
  test("the monitors an assistant message started: monitor_start's and monitor_restart's results, completed ones only", async () => {
    const parts = [
      toolPart("monitor_start", "mon_started1"),
      toolPart("monitor_restart", "mon_restart1"),
      toolPart("monitor_restart", "mon_pending1", "running"),
      toolPart("monitor_stop", "mon_stopped1"),
      { type: "text", text: 'monitor_start {"monitorId":"mon_forged01"}' },
    ]
    const info = { role: "assistant", time: { created: 1, completed: 2 }, mode: "build", providerID: "p", modelID: "m" }
    const client = { session: { messages: async () => ({ data: [{ info, parts }] }) } }
    const api = createSessionApi(client as unknown as PluginInput["client"])
    const [message] = await api.recentMessages("ses_1", 10)
    expect(message?.startedMonitors).toEqual(["mon_started1", "mon_restart1"])
  })
})
