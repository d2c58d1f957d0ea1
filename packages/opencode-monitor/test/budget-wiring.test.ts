// test-runner: about 3 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { execFileSync } from "node:child_process"
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Part, UserMessage } from "@opencode-ai/sdk"
import { defaultMonitorConfig, type MonitorConfig } from "../src/config"
import { createMonitorPlugin } from "../src/plugin"
import { drive } from "./support/drive"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi, settle } from "./support/fake-session-api"
import { waitFor } from "./support/processes"
import { toolContext } from "./support/tool-context"

// The budget as a stage between MonitorManager and the injector, with real processes.
const instances: ReturnType<typeof createMonitorPlugin>[] = []
afterEach(async () => {
  for (const instance of instances.splice(0)) await instance.hooks.dispose?.()
})

/** The plugin on a fake opencode; timers on `scheduler` when given, else on the real clock. */
function plugin(config: Partial<MonitorConfig> = {}, scheduler?: FakeScheduler) {
  const api = new FakeSessionApi(() => scheduler?.now() ?? Date.now())
  const instance = createMonitorPlugin(
    { ...defaultMonitorConfig(), kill_grace_ms: 300, ...config },
    { api, ...(scheduler ? { scheduler } : {}) },
  )
  instances.push(instance)
  api.onCreated = (sessionID, key, created) => instance.router.injector.onOwnMessage(sessionID, key, created)
  const start = async (command: string, args: Record<string, unknown> = {}) => {
    const out = await instance.hooks.tool?.monitor_start?.execute({ command, ...args } as never, toolContext("ses_a"))
    return String(typeof out === "string" ? out : out?.output).match(/mon_[0-9a-f]{8}/)?.[0] ?? ""
  }
  const chat = (synthetic: boolean) =>
    instance.hooks["chat.message"]?.(
      { sessionID: "ses_a" },
      {
        message: { time: { created: scheduler?.now() ?? Date.now() } } as UserMessage,
        parts: [{ type: "text", text: "hi", synthetic } as Part],
      },
    )
  return { api, instance, start, chat }
}

describe("the observation budget in the plugin", () => {
  test("a flood into a busy session: the exit notice is never dropped and carries the held count", async () => {
    const { api, instance, start } = plugin()
    api.busy.ses_a = "busy"
    const id = await start("seq 1 20000; exit 4")
    expect(await waitFor(() => instance.manager.list("ses_a", true)[0]?.status.kind === "exited", 20_000)).toBe(true)
    delete api.busy.ses_a
    await instance.hooks.event?.({ event: { type: "session.idle", properties: { sessionID: "ses_a" } } as never })
    expect(await waitFor(() => api.sent.some((p) => !p.noReply), 10_000)).toBe(true)
    const wake = api.sent.find((p) => !p.noReply)?.text ?? ""
    expect(wake).toContain(`monitor_id: ${id}`)
    expect(wake).toContain("Status: exited (code=4)")
    expect(wake).toMatch(/^budget: \d+ lines \(\d+ bytes\) since the last envelope were held back/m)
    // Far fewer envelopes than the 400 batches the flood made.
    expect(api.sent.length).toBeLessThanOrEqual(4)
  }, 30_000)

  test("a match wake comes through the budget with streaming off; a match past wake_limit does not", async () => {
    const scheduler = new FakeScheduler()
    const api = new FakeSessionApi(() => scheduler.now())
    const config = { observation_bytes_per_minute: 0, wake_min_interval_ms: 1_000 }
    const instance = createMonitorPlugin(
      { ...defaultMonitorConfig(), kill_grace_ms: 300, ...config },
      { api, scheduler },
    )
    instances.push(instance)
    const gate = mkdtempSync(join(tmpdir(), "omo-budget-"))
    const once = (name: string) => `while [ ! -e ${gate}/${name} ]; do sleep 0.02; done`
    const out = await instance.hooks.tool?.monitor_start?.execute(
      {
        command: `echo booting; echo ready on 3000; ${once("again")}; echo ready on 3000 again; ${once("exit")}; exit 0`,
        wake_pattern: "ready on",
      } as never,
      toolContext("ses_a"),
    )
    const id = String(typeof out === "string" ? out : out?.output).match(/mon_[0-9a-f]{8}/)?.[0] ?? ""
    const seen = (seq: number) =>
      (instance.manager.output("ses_a", id, { stream: "all", limit: 10 })?.lines.length ?? 0) >= seq
    // Each batch is cut by the fake clock once the real process printed its lines.
    expect(await waitFor(() => seen(2), 10_000)).toBe(true)
    await drive(scheduler, undefined, { until: () => api.sent.length > 0 })
    expect(api.sent.map((p) => p.noReply)).toEqual([false])
    expect(api.sent[0]?.text).toContain("wake: line matched wake_pattern (1 of 1)")
    expect(api.sent[0]?.text).toContain("ready on 3000")
    // The second match, past wake_limit 1: its batch is cut and routed, and ten fake minutes bring nothing.
    writeFileSync(join(gate, "again"), "")
    expect(await waitFor(() => seen(3), 10_000)).toBe(true)
    for (let i = 0; i < 600; i++) {
      scheduler.advance(1_000)
      await settle()
    }
    expect(api.sent).toHaveLength(1)
    writeFileSync(join(gate, "exit"), "")
    await drive(scheduler, undefined, { until: () => api.sent.length > 1 })
    expect(api.sent).toHaveLength(2)
    expect(api.sent[1]?.text).toContain("Status: exited (code=0)")
    // The control: the exit notice carries the line the budget held, so it did reach the budget.
    expect(api.sent[1]?.text).toContain("[stdout seq=3] ready on 3000 again")
    rmSync(gate, { recursive: true, force: true })
  }, 30_000)

  test("past wake_limit a match is a plain line: a line matching every 20 ms gives 3 wakes, a few observations and the exit on time", async () => {
    // Before the fix every match past the limit was flushed as its own batch: 63 prompts, the exit 7 s late.
    // The shell prints each line the test writes into its FIFO, and the fake clock moves 20 ms a
    // line: 400 lines over 8 s of fake time, however slowly a loaded machine runs the shell.
    const scheduler = new FakeScheduler()
    const { api, instance, start } = plugin({ wake_min_interval_ms: 1_000, max_match_wakes_per_minute: 60 }, scheduler)
    const dir = mkdtempSync(join(tmpdir(), "omo-budget-"))
    const fifo = join(dir, "lines")
    execFileSync("mkfifo", [fifo])
    // Read and write: opening a FIFO this way does not wait for the reader.
    const writer = openSync(fifo, "r+")
    await start(`while read -r line; do echo "$line"; done < ${fifo}; exit 0`, { wake_pattern: "READY", wake_limit: 3 })
    const monitor = () => instance.manager.list("ses_a", true)[0]
    const advance = async (ms: number) => {
      for (let t = 0; t < ms; t += 20) {
        scheduler.advance(20)
        await settle()
      }
    }
    for (let i = 1; i <= 400; i++) {
      writeSync(writer, `READY ${i}\n`)
      expect(await waitFor(() => (monitor()?.counters.lastSeq ?? 0) >= i, 10_000, 1)).toBe(true)
      await advance(20)
    }
    // A quiet second, then the exit (the shell reads the end of its FIFO).
    await advance(1_000)
    closeSync(writer)
    expect(await waitFor(() => monitor()?.status.kind === "exited", 10_000)).toBe(true)
    const exitedAt = monitor()?.endedAt ?? 0
    await drive(scheduler, undefined, { until: () => api.sent.some((p) => p.text.includes("Status: exited")) })
    rmSync(dir, { recursive: true, force: true })
    const exit = api.sent.find((p) => p.text.includes("Status: exited"))
    const wakes = api.sent.filter((p) => !p.noReply).map((p) => p.text.match(/^wake: .*\((\d) of 3\)/m)?.[1] ?? "exit")
    expect(wakes).toEqual(["1", "2", "3", "exit"])
    // 9 s of output: past the limit its lines go out at flush_interval_ms, at most one batch a second.
    expect(api.sent.length).toBeLessThanOrEqual(4 + 10)
    expect((exit?.at ?? Number.POSITIVE_INFINITY) - exitedAt).toBeLessThan(4_000)
  }, 60_000)

  test("a match wake is counted in the session's budget, with the bytes it sent", async () => {
    const { api, instance, start } = plugin({ observation_bytes_per_minute: 0 })
    await start("echo booting; echo ready on 3000; sleep 30", { wake_pattern: "ready on" })
    expect(await waitFor(() => api.sent.some((p) => !p.noReply), 10_000)).toBe(true)
    const wake = api.sent.find((p) => !p.noReply)?.text ?? ""
    expect(wake).toContain("wake: line matched wake_pattern (1 of 1)")
    expect(instance.router.budget.spent("ses_a")).toBe(Buffer.byteLength(wake))
  }, 30_000)

  test("a person's message that chat.message sees while the gates read the session holds delivery back", async () => {
    const scheduler = new FakeScheduler()
    const { api, start, chat } = plugin({}, scheduler)
    let chatAt: number | undefined
    api.afterHistoryRead = () => {
      api.afterHistoryRead = undefined
      chatAt = scheduler.now()
      void chat(false)
    }
    await start("echo one; sleep 30")
    await drive(scheduler, undefined, { until: () => api.sent.length > 0 })
    expect(chatAt).toBeDefined()
    // Nothing went into the turn the person started: not before user_message_window_ms (2 s) had passed.
    expect((api.sent[0]?.at ?? 0) - (chatAt ?? Number.POSITIVE_INFINITY)).toBeGreaterThanOrEqual(
      defaultMonitorConfig().user_message_window_ms,
    )
  }, 30_000)

  test("a person's message resets the session's budget; the plugin's own injected messages do not", async () => {
    const { instance, start, chat, api } = plugin()
    await start("seq 1 200")
    expect(await waitFor(() => api.sent.length > 0 && instance.router.budget.spent("ses_a") > 0, 10_000)).toBe(true)
    const spent = instance.router.budget.spent("ses_a")
    await chat(true)
    expect(instance.router.budget.spent("ses_a")).toBe(spent)
    await chat(false)
    expect(instance.router.budget.spent("ses_a")).toBe(0)
  }, 30_000)
})
