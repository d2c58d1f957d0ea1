import { afterEach, describe, expect, test } from "bun:test"
import { defaultMonitorConfig } from "../src/config"
import { createMonitorPlugin, type MonitorPluginInstance } from "../src/plugin"
import { type MonitorInfo, MonitorManager } from "../src/manager"
import { startMonitor } from "./support/start"
import { drive } from "./support/drive"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi } from "./support/fake-session-api"
import { liveProcesses, uniqueMarker, waitFor } from "./support/processes"
import { toolContext } from "./support/tool-context"

// Issue 12, finding 4: races around start, stop and supervision, with real processes.
const config = { ...defaultMonitorConfig(), kill_grace_ms: 300 }
const managers: MonitorManager[] = []
const instances: MonitorPluginInstance[] = []
afterEach(async () => {
  for (const manager of managers.splice(0)) await manager.shutdown()
  for (const instance of instances.splice(0)) await instance.hooks.dispose?.()
})

function manager(deps: Partial<ConstructorParameters<typeof MonitorManager>[1]> = {}, overrides = {}) {
  const ended: MonitorInfo[] = []
  const m = new MonitorManager(
    { ...config, ...overrides },
    { onBatch: () => {}, onEnded: (info) => ended.push(info), ...deps },
  )
  managers.push(m)
  return { m, ended }
}

const start = (m: MonitorManager, command: string, sessionID = "ses_r") =>
  startMonitor(m, { sessionID, directory: process.cwd(), command })

describe("MonitorManager under concurrency", () => {
  test("concurrent monitor_start calls in one step never pass max_monitors_per_session", async () => {
    const marker = uniqueMarker("cap_race")
    const instance = createMonitorPlugin(
      { ...config, max_monitors_per_session: 3 },
      { api: new FakeSessionApi(() => Date.now()) },
    )
    instances.push(instance)
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, () =>
        instance.hooks.tool?.monitor_start?.execute(
          { command: `sleep 30 # ${marker}` } as never,
          toolContext("ses_cap"),
        ),
      ),
    )
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(3)
    expect(instance.manager.list("ses_cap", false)).toHaveLength(3)
    const rejected = results.find((r): r is PromiseRejectedResult => r.status === "rejected")
    expect(String(rejected?.reason)).toContain("max_monitors_per_session=3")
  })

  test("a colliding monitor id never replaces a running monitor; shutdown stops both", async () => {
    const marker = uniqueMarker("collide")
    const ids = ["mon_00000001", "mon_00000001", "mon_00000002"]
    const { m } = manager({ newId: () => ids.shift() ?? "mon_ffffffff" })
    const a = await start(m, `sleep 30 # ${marker}`)
    const b = await start(m, `sleep 30 # ${marker}`)
    expect(b.id).not.toBe(a.id)
    expect(
      m
        .list("ses_r", false)
        .map((i) => i.id)
        .sort(),
    ).toEqual([a.id, b.id].sort())
    await m.shutdown()
    expect(liveProcesses(marker)).toEqual([])
  })

  test("a stop racing a natural exit reports the exit, not a stop", async () => {
    const marker = uniqueMarker("stop_race")
    const scheduler = new FakeScheduler()
    const { m } = manager({ scheduler })
    // The leader exits at once; a background child keeps the pipes open, so the monitor is still
    // draining (status running: the drain wait is on the fake clock) when the stop arrives.
    const info = await start(m, `sleep 3 & exit 3 # ${marker}`)
    const run = () => m.list("ses_r", true)[0]
    expect(await waitFor(() => run()?.ending?.reason === "exit", 5_000)).toBe(true)
    expect(run()?.status.kind).toBe("running")
    let stopped: MonitorInfo | undefined
    await drive(
      scheduler,
      m.stop("ses_r", info.id, "agent").then((s) => (stopped = s)),
    )
    // The background `sleep 3` it left behind was stopped by the monitor, and is named.
    const { leftBehind, ...status } = (stopped?.status ?? {}) as { leftBehind?: { name: string }[] }
    expect(status).toEqual({ kind: "exited", code: 3 })
    expect(leftBehind?.map((p) => p.name)).toEqual(["sleep"])
    expect(stopped?.ending).toEqual({ reason: "exit" })
  })

  test("a callback that throws affects neither its own monitor's end nor another monitor", async () => {
    const rejections: unknown[] = []
    const onRejection = (reason: unknown) => rejections.push(reason)
    process.on("unhandledRejection", onRejection)
    try {
      const errors: string[] = []
      const { m, ended } = manager({
        onBatch: (batch) => {
          if (batch.monitorId === "mon_bad00000") throw new Error("callback failed")
        },
        onError: (monitorId) => errors.push(monitorId),
        newId: (() => {
          const ids = ["mon_bad00000", "mon_good0000"]
          return () => ids.shift() ?? "mon_other000"
        })(),
      })
      await start(m, "echo one; exit 1")
      await start(m, "echo two; exit 2")
      expect(await waitFor(() => ended.length === 2, 5_000)).toBe(true)
      expect(ended.map((i) => [i.id, i.status]).sort()).toEqual([
        ["mon_bad00000", { kind: "exited", code: 1 }],
        ["mon_good0000", { kind: "exited", code: 2 }],
      ])
      expect(errors).toContain("mon_bad00000")
      // A rejection nobody handled is reported once the event loop turns.
      await new Promise((resolve) => setImmediate(resolve))
      expect(rejections).toEqual([])
    } finally {
      process.off("unhandledRejection", onRejection)
    }
  })
})

describe("session source classification", () => {
  test("a failed lookup is retried, not cached as primary: the subagent's exit reaches the root", async () => {
    const api = new FakeSessionApi(() => Date.now())
    api.parents.set("ses_child", "ses_root")
    api.parentFailures = 1
    const instance = createMonitorPlugin({ ...config, subagent_wake: "parent", user_message_window_ms: 0 }, { api })
    instances.push(instance)
    await instance.hooks.tool?.monitor_start?.execute({ command: "exit 9" } as never, toolContext("ses_child"))
    expect(await waitFor(() => api.sent.some((p) => !p.noReply), 5_000)).toBe(true)
    const wakes = api.sent.filter((p) => !p.noReply)
    expect(wakes.map((p) => p.sessionID)).toEqual(["ses_root"])
    expect(wakes[0]?.text).toContain("subagent_session: ses_child")
  })
})
