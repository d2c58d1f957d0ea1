// test-runner: about 4 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { defaultMonitorConfig } from "../src/config"
import { type MonitorInfo, MonitorManager, type StopResult } from "../src/manager"
import { isTerminalBatch, type OutputBatch } from "../src/pipeline/batcher"
import { createMonitorPlugin } from "../src/plugin"
import { type ProcessTable, processTable } from "../src/process/process-table"
import { drive } from "./support/drive"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi } from "./support/fake-session-api"
import { liveProcesses, uniqueMarker, waitFor } from "./support/processes"
import { startMonitor } from "./support/start"
import { toolContext } from "./support/tool-context"

// Races around start, stop and supervision, with real processes.
const config = { ...defaultMonitorConfig(), kill_grace_ms: 300 }
const managers: MonitorManager[] = []
const instances: ReturnType<typeof createMonitorPlugin>[] = []
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
    let stopped: StopResult | undefined
    await drive(
      scheduler,
      m.stop("ses_r", info.id, "agent").then((s) => (stopped = s)),
    )
    // The background `sleep 3` it left behind was stopped by the monitor, and is named.
    const { leftBehind, ...status } = (stopped?.info.status ?? {}) as { leftBehind?: { name: string }[] }
    expect(status).toEqual({ kind: "exited", code: 3 })
    expect(leftBehind?.map((p) => p.name)).toEqual(["sleep"])
    expect(stopped?.info.ending).toEqual({ reason: "exit" })
    // The stop found it already ending by itself: this call stopped nothing.
    expect(stopped?.outcome).toBe("ending")
  })

  test("a deadline passing after a shutdown signal keeps the shutdown's ending: stopped, no terminal batch", async () => {
    const marker = uniqueMarker("deadline_after_signal")
    const scheduler = new FakeScheduler()
    const batches: OutputBatch[] = []
    const { m, ended } = manager({ scheduler, onBatch: (batch) => batches.push(batch) })
    await startMonitor(m, {
      sessionID: "ses_r",
      directory: process.cwd(),
      command: `echo up; sleep 30 # ${marker}`,
      timeoutMs: 5_000,
    })
    // The signal handler's SIGTERM is sent; the deadline passes before the exit is seen.
    m.terminateAllNow()
    scheduler.advance(5_000)
    await drive(scheduler, undefined, { until: () => ended.length === 1 })
    expect(ended[0]?.ending).toEqual({ reason: "stop", by: "shutdown" })
    expect(ended[0]?.status.kind).toBe("stopped")
    expect(batches.filter(isTerminalBatch)).toEqual([])
    expect(liveProcesses(marker)).toEqual([])
  })

  test("a person's stop during the agent's stop does not lift the agent's silence", async () => {
    const marker = uniqueMarker("quiet")
    const batches: OutputBatch[] = []
    const { m } = manager({ onBatch: (batch) => batches.push(batch) }, { kill_grace_ms: 1_500, flush_interval_ms: 250 })
    // It ignores SIGTERM and prints all through the kill grace, until the SIGKILL.
    const info = await start(m, `trap "" TERM; while :; do echo tick; sleep 0.05; done; : ${marker}`)
    expect(await waitFor(() => batches.length > 0, 5_000)).toBe(true)
    const byAgent = m.stop("ses_r", info.id, "agent")
    const silencedAt = batches.length
    // The command keeps printing through the grace: the person's stop comes once it printed more.
    const printed = info.counters.total
    expect(await waitFor(() => info.counters.total >= printed + 3, 5_000)).toBe(true)
    const byPerson = m.stop("ses_r", info.id, "person")
    const outcomes = (await Promise.all([byAgent, byPerson])).map((result) => result?.outcome)
    expect(batches.length).toBe(silencedAt)
    expect(info.ending).toEqual({ reason: "stop", by: "agent" })
    expect(outcomes).toEqual(["stopped", "ending"])
    expect(liveProcesses(marker)).toEqual([])
  })

  test("a start whose session is deleted, or whose manager shuts down, the instant its process started is stopped and refused", async () => {
    for (const end of ["session", "shutdown"] as const) {
      const marker = uniqueMarker(`instant_${end}`)
      let ending: Promise<void> | undefined
      // The leader has just started when the table is first asked about it: the end comes then.
      const table: ProcessTable = {
        ...processTable,
        outputTargets(pid) {
          ending ??= end === "session" ? m.stopSession("ses_r") : m.shutdown()
          return processTable.outputTargets(pid)
        },
      }
      const { m } = manager({ processTable: table })
      const error = await start(m, `sleep 30; : ${marker}`).then(
        () => new Error("the start succeeded"),
        (thrown: Error) => thrown,
      )
      await ending
      expect(error).toMatchObject({ code: "cancelled" })
      expect(error.message).toBe(
        end === "session"
          ? "The monitor did not start: its session was deleted. Nothing runs."
          : "The monitor did not start: the plugin is shutting down (opencode disposed it). Nothing runs.",
      )
      // Nothing runs once the deletion or the shutdown has resolved; a deleted session's monitors are forgotten.
      expect(liveProcesses(marker)).toEqual([])
      expect(m.list("ses_r", true).map((i) => i.status.kind)).toEqual(end === "session" ? [] : ["stopped"])
    }
  })

  test("a stop whose process-table read fails still ends the group, and the failure is reported, not left unhandled", async () => {
    const rejections: unknown[] = []
    const onRejection = (reason: unknown) => rejections.push(reason)
    process.on("unhandledRejection", onRejection)
    try {
      const marker = uniqueMarker("table_fails")
      let failing = false
      const failed = () => Promise.reject(new Error("ps: cannot fork"))
      // Reads work while the monitor starts; from the stop on, every whole-table read fails.
      const table: ProcessTable = {
        ...processTable,
        scan: () => (failing ? failed() : processTable.scan()),
        findByEnvironment: (entry) => (failing ? failed() : processTable.findByEnvironment(entry)),
      }
      const errors: unknown[] = []
      const { m } = manager({ processTable: table, onError: (_id, error) => errors.push(error) })
      const info = await start(m, `sleep 30; : ${marker}`)
      expect(await waitFor(() => liveProcesses(marker).length > 0, 5_000)).toBe(true)
      failing = true
      let result: StopResult | undefined
      void m.stop("ses_r", info.id, "agent").then((stopped) => {
        result = stopped
      })
      expect(await waitFor(() => result !== undefined, 10_000)).toBe(true)
      expect(result?.outcome).toBe("stopped")
      expect(info.status.kind).toBe("stopped")
      expect(liveProcesses(marker)).toEqual([])
      expect(String(errors[0])).toContain("ps: cannot fork")
      await new Promise((resolve) => setImmediate(resolve))
      expect(rejections).toEqual([])
    } finally {
      process.off("unhandledRejection", onRejection)
    }
  }, 20_000)

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
