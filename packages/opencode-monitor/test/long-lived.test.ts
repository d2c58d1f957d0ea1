// test-runner: about 9 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { defaultMonitorConfig, type MonitorConfig } from "../src/config"
import { MonitorManager } from "../src/manager"
import { createMonitorPlugin } from "../src/plugin"
import { projectStateDir } from "../src/state/format"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi } from "./support/fake-session-api"
import { liveProcesses, uniqueMarker, waitFor } from "./support/processes"
import { startMonitor } from "./support/start"
import { type AskCall, toolContext } from "./support/tool-context"

// Jobs never meant to end: dev servers and watchers.
const config = { ...defaultMonitorConfig(), kill_grace_ms: 300 }
const managers: MonitorManager[] = []
const instances: ReturnType<typeof createMonitorPlugin>[] = []
const dirs: string[] = []
afterEach(async () => {
  for (const manager of managers.splice(0)) await manager.shutdown()
  for (const instance of instances.splice(0)) await instance.hooks.dispose?.()
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

function fakeClockManager(overrides: Partial<MonitorConfig> = {}) {
  const scheduler = new FakeScheduler()
  const m = new MonitorManager({ ...config, ...overrides }, { onBatch: () => {}, scheduler })
  managers.push(m)
  return { m, scheduler }
}

describe("no default deadline", () => {
  test("without timeout_ms or max_runtime_ms no deadline timer is armed, and the monitor says none", async () => {
    const { m, scheduler } = fakeClockManager()
    const info = await startMonitor(m, {
      sessionID: "s",
      directory: process.cwd(),
      command: `sleep 30 # ${uniqueMarker("nd")}`,
    })
    expect(info.timeoutMs).toBeUndefined()
    expect(scheduler.pendingTimers).toBe(0)
    scheduler.advance(7 * 24 * 3_600_000)
    expect(m.get("s", info.id)?.status.kind).toBe("running")
  })

  test("timeout_ms gives one job its deadline: one timer, and the job is timed out when it passes", async () => {
    const { m, scheduler } = fakeClockManager()
    const info = await startMonitor(m, {
      sessionID: "s",
      directory: process.cwd(),
      command: "sleep 30",
      timeoutMs: 5_000,
    })
    expect(info.timeoutMs).toBe(5_000)
    expect(scheduler.pendingTimers).toBe(1)
    scheduler.advance(5_000)
    await waitFor(() => m.get("s", info.id)?.status.kind !== "running", 5_000)
    expect(m.get("s", info.id)?.status).toMatchObject({ kind: "timed_out", afterMs: 5_000 })
  })

  test("a set max_runtime_ms is the default deadline and caps timeout_ms", async () => {
    const { m, scheduler } = fakeClockManager({ max_runtime_ms: 60_000 })
    const info = await startMonitor(m, { sessionID: "s", directory: process.cwd(), command: "sleep 30" })
    expect(info.timeoutMs).toBe(60_000)
    expect(scheduler.pendingTimers).toBe(1)
    await expect(
      startMonitor(m, { sessionID: "s", directory: process.cwd(), command: "sleep 30", timeoutMs: 60_001 }),
    ).rejects.toThrow("timeout_ms must be an integer from 1 to 60000 (max_runtime_ms); got 60001.")
  })

  test("without a cap timeout_ms may be up to 7 days; wake_on_silence_ms is bounded", async () => {
    const { m } = fakeClockManager()
    const start = (extra: object) =>
      startMonitor(m, { sessionID: "s", directory: process.cwd(), command: "sleep 30", ...extra })
    await expect(start({ timeoutMs: 604_800_001 })).rejects.toThrow("from 1 to 604800000 (7 days)")
    await expect(start({ silenceMs: 999 })).rejects.toThrow(
      "wake_on_silence_ms must be an integer from 1000 to 86400000",
    )
    await expect(start({ silenceMs: 86_400_001 })).rejects.toThrow("wake_on_silence_ms must be an integer")
  })
})

function plugin(overrides: Partial<MonitorConfig> = {}) {
  const api = new FakeSessionApi(() => Date.now())
  const root = mkdtempSync(join(tmpdir(), "omo-long-"))
  dirs.push(root)
  const env = { ...process.env, XDG_STATE_HOME: join(root, "state") }
  const instance = createMonitorPlugin({ ...config, ...overrides }, { api, directory: join(root, "project"), env })
  instances.push(instance)
  const tools = instance.hooks.tool ?? {}
  const run = async (name: string, args: Record<string, unknown>, ctx = toolContext("ses_a")) => {
    const result = await tools[name]?.execute(args as never, ctx)
    return typeof result === "string" ? result : (result?.output ?? "")
  }
  const stateText = () => {
    const dir = projectStateDir(join(root, "project"), env)
    return readdirSync(dir)
      .filter((f) => f.endsWith(".json"))
      .map((f) => readFileSync(join(dir, f), "utf8"))
      .join("\n")
  }
  return { api, instance, run, stateText }
}

const idOf = (text: string, pattern = /Started monitor (mon_[0-9a-f]+)/) => text.match(pattern)?.[1] as string

describe("monitor_restart", () => {
  test("stops the old group and waits until it is gone, then starts the same command with the same options", async () => {
    const marker = uniqueMarker("restart")
    const { api, instance, run, stateText } = plugin()
    const started = await run("monitor_start", {
      command: `echo up; sleep 60; : ${marker}`,
      label: "dev",
      match_pattern: "up|down",
      wake_pattern: "ready",
      wake_limit: 2,
      wake_on_silence_ms: 60_000,
      timeout_ms: 600_000,
    })
    const oldId = idOf(started)
    expect(await waitFor(() => liveProcesses(marker).length > 0, 5_000)).toBe(true)
    const oldPids = liveProcesses(marker).map((row) => row.trim().split(/\s+/)[0])

    const restarted = await run("monitor_restart", { monitor_id: oldId })
    const newId = idOf(restarted)
    expect(restarted).toContain(`the old monitor ${oldId} ended with status stopped; the new one is ${newId}.`)
    expect(newId).not.toBe(oldId)
    // The old processes were gone before the new one started: none of them is left now.
    const now = liveProcesses(marker).map((row) => row.trim().split(/\s+/)[0])
    for (const pid of oldPids) expect(now).not.toContain(pid)
    expect(now.length).toBeGreaterThan(0)
    const old = instance.manager.get("ses_a", oldId)
    const fresh = instance.manager.get("ses_a", newId)
    expect(old?.status).toMatchObject({ kind: "stopped" })
    expect(old?.ending).toEqual({ reason: "stop", by: "agent" })
    expect(fresh).toMatchObject({
      label: "dev",
      pattern: "up|down",
      wakePattern: "ready",
      wakeLimit: 2,
      silenceMs: 60_000,
      timeoutMs: 600_000,
      status: { kind: "running" },
    })
    // The command stays in memory: never listed, never written to the state record.
    expect(await run("monitor_list", { include_exited: true })).not.toContain(marker)
    await waitFor(() => stateText().includes(newId), 5_000)
    expect(stateText()).toContain(newId)
    expect(stateText()).not.toContain(marker)
    // No wake for the old one's end.
    expect(api.sent.filter((p) => p.text.includes(oldId) && !p.noReply)).toEqual([])
    expect(api.toasts.filter((t) => t.message.includes(oldId)).map((t) => t.variant)).toEqual(["info"])
  })

  test("a restart takes over the running monitor's slot, even at max_monitors_per_session", async () => {
    const { run, instance } = plugin({ max_monitors_per_session: 1 })
    const oldId = idOf(await run("monitor_start", { command: "sleep 60" }))
    const newId = idOf(await run("monitor_restart", { monitor_id: oldId }))
    expect(instance.manager.list("ses_a", false).map((m) => m.id)).toEqual([newId])
    await expect(run("monitor_start", { command: "sleep 60" })).rejects.toThrow("max_monitors_per_session=1")
  })

  test("an ended monitor is started again (run the tests again); its old status is named", async () => {
    const { run, instance } = plugin()
    const oldId = idOf(await run("monitor_start", { command: "echo done; exit 3" }))
    await waitFor(() => instance.manager.get("ses_a", oldId)?.status.kind !== "running", 5_000)
    const restarted = await run("monitor_restart", { monitor_id: oldId })
    expect(restarted).toContain(`the old monitor ${oldId} ended with status exited (code=3)`)
  })

  test("the permission rules judge the command again: a reject leaves the old monitor running", async () => {
    const marker = uniqueMarker("restart_ask")
    const { run, instance } = plugin()
    const asks: AskCall[] = []
    const oldId = idOf(await run("monitor_start", { command: `sleep 60; : ${marker}` }, toolContext("ses_a", { asks })))
    expect(asks.map((a) => a.patterns)).toEqual([["sleep 60", `: ${marker}`]])
    const again = toolContext("ses_a", { ask: "reject", asks })
    await expect(run("monitor_restart", { monitor_id: oldId }, again)).rejects.toThrow("rejected")
    expect(asks.map((a) => a.patterns)).toEqual([
      ["sleep 60", `: ${marker}`],
      ["sleep 60", `: ${marker}`],
    ])
    expect(instance.manager.get("ses_a", oldId)?.status.kind).toBe("running")
    expect(liveProcesses(marker).length).toBeGreaterThan(0)
    expect(instance.manager.list("ses_a", false)).toHaveLength(1)
  })

  test("when the new spawn fails, the error says the old one was stopped and why the new one did not start", async () => {
    const { run, instance } = plugin()
    const dir = mkdtempSync(join(tmpdir(), "omo-restart-gone-"))
    dirs.push(dir)
    const ctx = toolContext("ses_a", { directory: dir })
    const oldId = idOf(await run("monitor_start", { command: "sleep 60", label: "dev" }, ctx))
    // The project folder went away under the running server (a branch switch, a clean checkout).
    rmSync(dir, { recursive: true, force: true })
    const failed: Error = await run("monitor_restart", { monitor_id: oldId }, ctx).then(
      () => new Error("the restart succeeded"),
      (error: Error) => error,
    )
    expect(failed.message).toContain(
      `The old monitor ${oldId} (dev) was stopped, with status stopped, but the new one did not start: Cannot start the command (dev): cannot start `,
    )
    // The shell is whichever the server chose (opencode's rule); the folder is what went missing.
    expect(failed.message).toContain(` in ${dir}: the directory or `)
    expect(failed.message).toEndWith("Nothing runs in its place; start it again with monitor_start once that is fixed.")
    expect(instance.manager.get("ses_a", oldId)?.status.kind).toBe("stopped")
    // Nothing runs and nothing holds the slot: a start in a folder that exists works at once.
    expect(instance.manager.list("ses_a", false)).toEqual([])
    expect(idOf(await run("monitor_start", { command: "sleep 60" }))).toMatch(/^mon_/)
  })

  test("when the old monitor exits by itself as the restart comes and the new spawn fails, the error says it exited", async () => {
    const { run, instance } = plugin({ kill_grace_ms: 2_000 })
    const dir = mkdtempSync(join(tmpdir(), "omo-restart-exit-"))
    dirs.push(dir)
    const ctx = toolContext("ses_a", { directory: dir })
    // The leader exits after 0.3 s; a child that ignores SIGTERM holds the pipes, so the monitor
    // stays running (draining, then stopping what it left) for over 2 s after that exit.
    const command = `(trap "" TERM; sleep 5) & sleep 0.3; exit 3`
    const oldId = idOf(await run("monitor_start", { command, label: "dev" }, ctx))
    expect(await waitFor(() => instance.manager.get("ses_a", oldId)?.ending?.reason === "exit", 5_000)).toBe(true)
    rmSync(dir, { recursive: true, force: true })
    const failed: Error = await run("monitor_restart", { monitor_id: oldId }, ctx).then(
      () => new Error("the restart succeeded"),
      (error: Error) => error,
    )
    expect(failed.message).toStartWith(
      `The old monitor ${oldId} (dev) was already ending (it exited by itself), with status exited (code=3)`,
    )
    expect(failed.message).toContain("but the new one did not start: Cannot start the command (dev)")
  })

  test("parallel restarts of one running monitor start one new monitor; the others are refused and the cap holds", async () => {
    const marker = uniqueMarker("restart_par")
    const { run, instance } = plugin({ max_monitors_per_session: 1 })
    const oldId = idOf(await run("monitor_start", { command: `sleep 60; : ${marker}`, label: "dev" }))
    expect(await waitFor(() => liveProcesses(marker).length > 0, 5_000)).toBe(true)
    const oldPids = liveProcesses(marker).map((row) => row.trim().split(/\s+/)[0])
    const results = await Promise.allSettled([1, 2, 3].map(() => run("monitor_restart", { monitor_id: oldId })))
    const started = results.flatMap((r) => (r.status === "fulfilled" ? [idOf(r.value)] : []))
    const refused = results.flatMap((r) => (r.status === "rejected" ? [(r.reason as Error).message] : []))
    expect(started).toHaveLength(1)
    expect(refused).toEqual(
      Array(2).fill(
        `Monitor ${oldId} is already being restarted by another monitor_restart call; that call's result names the new monitor (monitor_list shows it too).`,
      ),
    )
    expect(instance.manager.list("ses_a", false).map((m) => m.id)).toEqual(started)
    // The old one is gone; one new one runs (its shell's fork for `sleep` shows the marker until it execs).
    const pids = () => liveProcesses(marker).map((row) => row.trim().split(/\s+/)[0])
    for (const pid of oldPids) expect(pids()).not.toContain(pid)
    expect(await waitFor(() => pids().length === 1, 5_000)).toBe(true)
    await expect(run("monitor_start", { command: "sleep 60" })).rejects.toThrow("max_monitors_per_session=1")
  })

  test("parallel restarts of one ended monitor run it once", async () => {
    const marker = uniqueMarker("restart_par_ended")
    const { run, instance } = plugin()
    const oldId = idOf(await run("monitor_start", { command: `sleep 0.1; : ${marker}` }))
    expect(await waitFor(() => instance.manager.get("ses_a", oldId)?.status.kind === "exited", 5_000)).toBe(true)
    const results = await Promise.allSettled([1, 2].map(() => run("monitor_restart", { monitor_id: oldId })))
    expect(results.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"])
    expect(instance.manager.list("ses_a", true).filter((m) => m.id !== oldId)).toHaveLength(1)
  })

  test("a restart racing a start at max_monitors_per_session: the restart takes the slot, the start is refused", async () => {
    const { run, instance } = plugin({ max_monitors_per_session: 1 })
    const oldId = idOf(await run("monitor_start", { command: "sleep 60" }))
    const [restarted, started] = await Promise.allSettled([
      run("monitor_restart", { monitor_id: oldId }),
      run("monitor_start", { command: "sleep 60" }),
    ])
    expect(restarted?.status).toBe("fulfilled")
    expect(started?.status === "rejected" && String(started.reason)).toContain("max_monitors_per_session=1")
    expect(instance.manager.list("ses_a", false)).toHaveLength(1)
  })

  for (const end of ["session.deleted", "dispose"] as const) {
    test(`a restart that waits for the old group when ${end === "dispose" ? "the plugin is disposed" : "its session is deleted"} starts nothing and says why`, async () => {
      const marker = uniqueMarker("restart_end")
      const { run, instance } = plugin({ kill_grace_ms: 1_500 })
      const command = `trap "" TERM; while :; do sleep 1; done; : ${marker}`
      const oldId = idOf(await run("monitor_start", { command, label: "dev" }))
      expect(await waitFor(() => liveProcesses(marker).length > 0, 5_000)).toBe(true)
      const restarting = run("monitor_restart", { monitor_id: oldId }).then(
        () => new Error("the restart succeeded"),
        (error: Error) => error,
      )
      // The old group ignores SIGTERM: the restart waits out the 1.5 s grace for it.
      expect(await waitFor(() => instance.manager.get("ses_a", oldId)?.ending !== undefined, 5_000)).toBe(true)
      const ended =
        end === "dispose"
          ? instance.hooks.dispose?.()
          : instance.hooks.event?.({
              event: { type: "session.deleted", properties: { info: { id: "ses_a" } } } as never,
            })
      const error = await restarting
      await ended
      const why = end === "dispose" ? "the plugin is shutting down (opencode disposed it)" : "its session was deleted"
      expect(error).toMatchObject({ code: "cancelled" })
      expect(error.message).toBe(
        `The old monitor ${oldId} (dev) was stopped, with status stopped, but the new one was not started: ${why}. Nothing runs in its place.`,
      )
      // The restart returned once the old group was gone, and nothing new was spawned: a deleted
      // session's monitors are forgotten; a disposed plugin keeps the old one and starts no other.
      expect(liveProcesses(marker)).toEqual([])
      const left = () => instance.manager.list("ses_a", true).map((m) => m.id)
      if (end === "session.deleted") expect(await waitFor(() => left().length === 0, 2_000)).toBe(true)
      else {
        expect(left()).toEqual([oldId])
        await expect(run("monitor_start", { command: "sleep 60" })).rejects.toThrow(
          "The monitor did not start: the plugin is shutting down (opencode disposed it). Nothing runs.",
        )
      }
    })
  }

  test("another session's monitor is not_found", async () => {
    const { run } = plugin()
    const oldId = idOf(await run("monitor_start", { command: "sleep 60" }))
    await expect(run("monitor_restart", { monitor_id: oldId }, toolContext("ses_b"))).rejects.toThrow(
      `No monitor "${oldId}" in this session`,
    )
  })
})

describe("the agent sees what runs and for how long", () => {
  test("a second monitor with a running one's label starts, says so and points at monitor_restart", async () => {
    const { run } = plugin()
    const first = idOf(await run("monitor_start", { command: "sleep 60", label: "dev" }))
    const second = await run("monitor_start", { command: "sleep 60", label: "dev" })
    expect(idOf(second)).toBeDefined()
    expect(second).toContain(`Note: monitor ${first} with the label "dev" is still running in this session`)
    expect(second).toContain(`monitor_restart with monitor_id "${first}"`)
    const third = await run("monitor_start", { command: "sleep 60", label: "other" })
    expect(third).not.toContain("Note:")
  })

  test("monitor_list and the compaction context show each deadline, or none", async () => {
    const { run, instance } = plugin()
    const free = idOf(await run("monitor_start", { command: "sleep 60", label: "srv" }))
    const bounded = idOf(await run("monitor_start", { command: "sleep 60", label: "tests", timeout_ms: 120_000 }))
    const listed = JSON.parse(await run("monitor_list", {})).monitors as { monitor_id: string; deadline: string }[]
    expect(listed.find((m) => m.monitor_id === free)?.deadline).toBe("none")
    expect(listed.find((m) => m.monitor_id === bounded)?.deadline).toMatch(/^\d{4}-.*Z \(timeout_ms 120000\)$/)
    const output = { context: [] as string[], prompt: undefined }
    await instance.hooks["experimental.session.compacting"]?.({ sessionID: "ses_a" }, output)
    const context = output.context.join("\n")
    expect(context).toMatch(new RegExp(`${free} \\(srv\\), started .*, deadline: none`))
    expect(context).toMatch(new RegExp(`${bounded} \\(tests\\), started .*, deadline: .*\\(timeout_ms 120000\\)`))
    expect(context).toContain("monitor_restart")
  })

  test("the tool description tells the agent when to pass timeout_ms", () => {
    const { instance } = plugin()
    const description = instance.hooks.tool?.monitor_start?.description ?? ""
    expect(description).toContain(
      "Pass timeout_ms for a job that should end (build, tests); pass none for a dev server",
    )
    expect(description).toContain("wake_on_silence_ms")
  })
})
