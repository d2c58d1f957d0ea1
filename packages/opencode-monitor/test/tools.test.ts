// test-runner: about 10 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { defaultMonitorConfig, type MonitorConfig } from "../src/config"
import { MonitorError } from "../src/errors"
import { createMonitorPlugin } from "../src/plugin"
import { FakeSessionApi } from "./support/fake-session-api"
import { liveProcesses, uniqueMarker, waitFor } from "./support/processes"
import { type AskCall, toolContext } from "./support/tool-context"

const instances: ReturnType<typeof createMonitorPlugin>[] = []
afterEach(async () => {
  for (const instance of instances.splice(0)) await instance.hooks.dispose?.()
})

function plugin(overrides: Partial<MonitorConfig> = {}) {
  const api = new FakeSessionApi(() => Date.now())
  const instance = createMonitorPlugin({ ...defaultMonitorConfig(), kill_grace_ms: 300, ...overrides }, { api })
  instances.push(instance)
  const tools = instance.hooks.tool ?? {}
  const run = async (name: string, args: Record<string, unknown>, ctx = toolContext("ses_a")) => {
    const result = await tools[name]?.execute(args as never, ctx)
    return typeof result === "string" ? result : (result?.output ?? "")
  }
  return { api, instance, tools, run }
}

// Commands for monitor_stop: one that ignores SIGTERM (SIGKILL after the grace), a node http
// server that takes 300 ms to close on SIGTERM, and one that exits at once.
const IGNORES_TERM = `trap "" TERM; echo up; while :; do sleep 1; done`
const SLOW_SERVER = `node -e 'const s = require("http").createServer().listen(0, () => console.log("listening")); process.on("SIGTERM", () => setTimeout(() => { s.close(); process.exit(0) }, 300))'`

describe("monitor_stop says what really happened", () => {
  const idOf = (text: string) => text.match(/mon_[0-9a-f]{8}/)?.[0] as string

  test("a running monitor is stopped by the call: it says so, with the final status and counters", async () => {
    for (const [command, label] of [
      [IGNORES_TERM, "stubborn"],
      [SLOW_SERVER, "server"],
    ] as const) {
      const marker = uniqueMarker(label)
      const { run, api } = plugin()
      const id = idOf(await run("monitor_start", { command: `${command}; : ${marker}`, label }))
      expect(await waitFor(() => api.sent.length > 0, 5_000)).toBe(true)
      const stopped = JSON.parse(await run("monitor_stop", { monitor_id: id }))
      expect(stopped.status).toBe("stopped")
      expect(stopped.note).toBe(
        `Stopped. Output not yet delivered is not sent; read it with monitor_output (monitor_id "${id}") while it is retained.`,
      )
      expect(stopped.counters).toMatchObject({ total: 1 })
      expect(liveProcesses(marker)).toEqual([])
    }
  })

  test("a monitor that had already exited: its exit stands and nothing was stopped", async () => {
    const { run, instance } = plugin()
    const id = idOf(await run("monitor_start", { command: "echo done; exit 0" }))
    expect(await waitFor(() => instance.manager.get("ses_a", id)?.status.kind === "exited", 5_000)).toBe(true)
    const stopped = JSON.parse(await run("monitor_stop", { monitor_id: id }))
    expect(stopped.status).toBe("exited (code=0)")
    expect(stopped.note).toBe("It had already ended before this call: it exited by itself; nothing was stopped.")
  })

  test("a person's stop under way when the agent's comes: the person stopped it, not this call", async () => {
    const marker = uniqueMarker("person_first")
    const { run, instance } = plugin({ kill_grace_ms: 1_000 })
    const id = idOf(await run("monitor_start", { command: `${IGNORES_TERM}; : ${marker}` }))
    expect(await waitFor(() => liveProcesses(marker).length > 0, 5_000)).toBe(true)
    const person = instance.manager.stop("ses_a", id, "person")
    const stopped = JSON.parse(await run("monitor_stop", { monitor_id: id }))
    await person
    expect(stopped.status).toBe("stopped (by the person at the screen)")
    expect(stopped.note).toStartWith(
      "It was already ending when this call came: the person at the screen stopped it. Nothing more was stopped",
    )
  })
})

describe("monitor tools through the plugin's hooks", () => {
  test("the five tools are registered with descriptions that teach the contract", () => {
    const { tools } = plugin()
    expect(Object.keys(tools).sort()).toEqual([
      "monitor_list",
      "monitor_output",
      "monitor_restart",
      "monitor_start",
      "monitor_stop",
    ])
    expect(tools.monitor_start?.description).toContain("Do not poll, sleep")
    expect(tools.monitor_start?.description).toContain("woken with its exit status")
    expect(tools.monitor_start?.description).toContain(
      "instead of bash for anything that may run longer than bash's 2-minute timeout",
    )
    expect(tools.monitor_start?.description).toContain("with no stdin and no TTY")
  })

  test("monitor_start names the bash tool's shell, also when opencode.json sets one", async () => {
    const { tools, instance } = plugin()
    expect(tools.monitor_start?.description).toMatch(/The command runs in \/\S+ \(`\/\S+ -c <command>`\)/)
    await instance.hooks.config?.({ shell: "/bin/sh" } as never)
    expect(tools.monitor_start?.description).toContain("The command runs in /bin/sh (`/bin/sh -c <command>`)")
    expect((tools.monitor_start?.args.command as { description?: string } | undefined)?.description).toContain(
      "/bin/sh -c <command>",
    )
  })

  test("the person gets a toast when a monitor ends: success for exit 0, warning for a timeout, error otherwise", async () => {
    const { run, api } = plugin()
    await run("monitor_start", { command: "exit 0", label: "ok" })
    await run("monitor_start", { command: "sleep 5", label: "slow", timeout_ms: 300 })
    await run("monitor_start", { command: "exit 2", label: "bad" })
    expect(await waitFor(() => api.toasts.length === 3, 10_000)).toBe(true)
    const variantOf = (label: string) => api.toasts.find((t) => t.title === `monitor ${label}`)?.variant
    expect([variantOf("ok"), variantOf("slow"), variantOf("bad")]).toEqual(["success", "warning", "error"])
  })

  test("monitor_start tells the agent who is woken: itself, or for a subagent the root session", async () => {
    const { run, api } = plugin()
    api.parents.set("ses_child", "ses_mid")
    api.parents.set("ses_mid", "ses_root")
    const own = await run("monitor_start", { command: "sleep 5", label: "own" }, toolContext("ses_a"))
    expect(own).toContain("you will be woken with the exit status when it ends.")
    const child = await run("monitor_start", { command: "sleep 5", label: "child" }, toolContext("ses_child"))
    expect(child).toContain("its exit status wakes the root session (ses_root), not this one.")
    expect(child).not.toContain("you will be woken")
    const off = plugin({ subagent_wake: "off" })
    off.api.parents.set("ses_child", "ses_root")
    expect(await off.run("monitor_start", { command: "sleep 5" }, toolContext("ses_child"))).toContain(
      "nobody is woken",
    )
  })

  test("monitor_start asks the bash permission with the command, then runs it", async () => {
    const asks: AskCall[] = []
    const { run, api } = plugin()
    const out = await run(
      "monitor_start",
      { command: "echo hello; exit 7", label: "qa" },
      toolContext("ses_a", { asks }),
    )
    expect(asks).toEqual([
      {
        permission: "bash",
        patterns: ["echo hello", "exit 7"],
        always: ["echo *", "exit *"],
        metadata: {
          command: "echo hello; exit 7",
          label: "qa",
          description: 'opencode-monitor: run in the background as "qa"',
        },
      },
    ])
    expect(out).toMatch(/^Started monitor mon_[0-9a-f]{8} \(label: qa\)\./)
    expect(out).toContain("Do not poll")
    expect(await waitFor(() => api.sent.some((p) => !p.noReply), 5_000)).toBe(true)
    const wake = api.sent.find((p) => !p.noReply)
    expect(wake?.text).toContain("[stdout seq=1] hello")
    expect(wake?.text).toContain("Status: exited (code=7)")
    expect(api.toasts.map((t) => t.variant)).toEqual(["error"])
  })

  test("an out-of-tree path asks external_directory first, then bash, both naming the command and label", async () => {
    const asks: AskCall[] = []
    const { run } = plugin()
    const directory = mkdtempSync(join(tmpdir(), "tools-ext-"))
    await run("monitor_start", { command: "cat ../outside.txt" }, toolContext("ses_a", { asks, directory }))
    const parent = dirname(directory)
    expect(asks).toEqual([
      {
        permission: "external_directory",
        patterns: [join(parent, "*")],
        always: [join(parent, "*")],
        metadata: { command: "cat ../outside.txt", label: "cat", directories: [parent], patterns: [join(parent, "*")] },
      },
      {
        permission: "bash",
        patterns: ["cat ../outside.txt"],
        always: ["cat *"],
        metadata: {
          command: "cat ../outside.txt",
          label: "cat",
          description: 'opencode-monitor: run in the background as "cat"',
        },
      },
    ])
  })

  test("a rejected permission spawns nothing", async () => {
    const marker = uniqueMarker("rejected")
    const { run, instance } = plugin()
    await expect(
      run("monitor_start", { command: `sleep 5; : ${marker}` }, toolContext("ses_a", { ask: "reject" })),
    ).rejects.toThrow(/rejected permission/)
    // A start the tool made would have spawned before it answered: nothing to wait for.
    expect(liveProcesses(marker)).toEqual([])
    expect(instance.manager.list("ses_a", true)).toEqual([])
  })

  test("a command too large to judge is refused before any question, with what to do, and nothing runs", async () => {
    const marker = uniqueMarker("unjudged")
    const asks: AskCall[] = []
    const { run, instance } = plugin()
    const deep = `echo ${"$(".repeat(1_500)}: ${marker}${")".repeat(1_500)}; sleep 5`
    await expect(run("monitor_start", { command: deep }, toolContext("ses_a", { asks }))).rejects.toThrow(
      /too large to check against the permission rules .*put the script in a file/,
    )
    expect(asks).toEqual([])
    // The refusal came before any spawn: there is nothing to wait for.
    expect(liveProcesses(marker)).toEqual([])
    expect(instance.manager.list("ses_a", true)).toEqual([])
  })

  test("without ask, allowed_commands is the fail-closed fallback", async () => {
    const { run } = plugin({ allowed_commands: ["echo"] })
    const noAsk = () => toolContext("ses_a", { ask: "absent" })
    await expect(run("monitor_start", { command: "sleep 1" }, noAsk())).rejects.toThrow(
      'Permission denied: this opencode cannot ask the user, and "sleep" is not in allowed_commands',
    )
    await expect(run("monitor_start", { command: "echo hi; rm -rf x" }, noAsk())).rejects.toThrow(
      /"rm" is not in allowed_commands \(every program of a compound command must be listed\)/,
    )
    await expect(run("monitor_start", { command: "echo $(rm -rf x)" }, noAsk())).rejects.toThrow(/"rm"/)
    await expect(run("monitor_start", { command: "KEY=1 command rm -rf x" }, noAsk())).rejects.toThrow(/"rm"/)
    expect(await run("monitor_start", { command: "echo hi" }, noAsk())).toStartWith("Started monitor")
    expect(await run("monitor_start", { command: "echo a; echo b | echo c" }, noAsk())).toStartWith("Started monitor")
  })

  test("allowed_commands is only the fallback: where opencode can ask, a listed program is still asked, and a refusal refuses", async () => {
    const asks: AskCall[] = []
    const { run, instance } = plugin({ allowed_commands: ["echo"] })
    expect(await run("monitor_start", { command: "echo hi" }, toolContext("ses_a", { asks }))).toStartWith("Started")
    expect(asks.map((a) => a.permission)).toEqual(["bash"])
    await expect(run("monitor_start", { command: "echo hi" }, toolContext("ses_b", { ask: "reject" }))).rejects.toThrow(
      /rejected permission/,
    )
    expect(instance.manager.list("ses_b", true)).toEqual([])
  })

  test("an automation agent's session is never woken, not even by the exit; another agent's is", async () => {
    const { run, api } = plugin({ automation_agents: ["ci-bot"] })
    const out = await run("monitor_start", { command: "exit 3" }, toolContext("ses_bot", { agent: "ci-bot" }))
    expect(out).toContain("automation sessions are never woken")
    await run("monitor_start", { command: "exit 3" }, toolContext("ses_a", { agent: "build" }))
    const ended = (session: string) =>
      api.sent.some((p) => p.sessionID === session && p.text.includes("Status: exited (code=3)"))
    expect(await waitFor(() => ended("ses_bot") && ended("ses_a"), 10_000)).toBe(true)
    const bot = api.sent.filter((p) => p.sessionID === "ses_bot")
    expect(bot.length).toBeGreaterThan(0)
    expect(bot.every((p) => p.noReply)).toBe(true)
    expect(api.sent.filter((p) => p.sessionID === "ses_a").map((p) => p.noReply)).toContain(false)
  })

  test("monitor_start and monitor_restart answer the monitor's limits and how to stop it", async () => {
    const { run } = plugin()
    const open = await run("monitor_start", { command: "sleep 30", label: "srv" })
    const openId = open.match(/mon_[0-9a-f]{8}/)?.[0]
    expect(open).toContain("Limits: no deadline (it runs until it exits or is stopped);")
    expect(open).toContain(`To stop it: monitor_stop with monitor_id "${openId}"; to restart it: monitor_restart.`)
    const job = await run("monitor_start", { command: "sleep 30", label: "job", timeout_ms: 60_000 })
    const jobId = job.match(/mon_[0-9a-f]{8}/)?.[0] as string
    expect(job).toContain("Limits: stopped after 60000 ms;")
    const restarted = await run("monitor_restart", { monitor_id: jobId })
    const newId = restarted.match(/the new one is (mon_[0-9a-f]{8})\./)?.[1]
    expect(newId).toBeDefined()
    expect(newId).not.toBe(jobId)
    expect(restarted).toContain(`Started monitor ${newId} (label: job).`)
    expect(restarted).toContain("Limits: stopped after 60000 ms;")
    expect(restarted).toContain(`To stop it: monitor_stop with monitor_id "${newId}"`)
  })

  test("cap reached names the monitors to stop", async () => {
    const marker = uniqueMarker("cap")
    const { run } = plugin({ max_monitors_per_session: 1 })
    const first = await run("monitor_start", { command: `sleep 30 # ${marker}`, label: "long" })
    const id = first.match(/mon_[0-9a-f]{8}/)?.[0]
    await expect(run("monitor_start", { command: "sleep 1" })).rejects.toThrow(
      `max_monitors_per_session=1). Stop one first with monitor_stop: ${id} (long).`,
    )
    // Another session has its own cap.
    expect(await run("monitor_start", { command: `sleep 30 # ${marker}` }, toolContext("ses_b"))).toStartWith("Started")
  })

  test("an invalid pattern and a spawn failure are distinct errors", async () => {
    const { run } = plugin()
    await expect(run("monitor_start", { command: "echo x", match_pattern: "(" })).rejects.toThrow(/not a valid RE2/)
    await expect(run("monitor_start", { command: "no-such-program-q" })).rejects.toThrow(/command not found on PATH/)
  })

  test("wake_pattern: a matching line wakes the session while the command still runs; the description says when to use it", async () => {
    const { run, api, tools } = plugin()
    expect(tools.monitor_start?.description).toContain("wake_pattern")
    expect(tools.monitor_start?.description).toContain("readiness")
    const out = await run("monitor_start", {
      command: "echo booting; echo 'ready on :3000'; sleep 30",
      label: "dev",
      wake_pattern: "ready on",
    })
    expect(out).toContain('A line matching "ready on" wakes you (at most 1 time')
    expect(await waitFor(() => api.sent.some((p) => !p.noReply), 5_000)).toBe(true)
    const wake = api.sent.find((p) => !p.noReply)?.text ?? ""
    expect(wake).toContain("\nwake: line matched wake_pattern (1 of 1) at seq=2\n")
    expect(wake).toContain("[stdout seq=2] ready on :3000")
    expect(wake).toContain("\nStatus: running\n")
    const id = out.match(/mon_[0-9a-f]{8}/)?.[0] ?? ""
    expect(JSON.parse(await run("monitor_list", {})).monitors[0]).toMatchObject({
      wake_pattern: "ready on",
      wake_limit: 1,
    })
    await run("monitor_stop", { monitor_id: id })
  })

  test("a bad wake_pattern or a wake_limit without one is refused with what to do", async () => {
    const { run } = plugin()
    await expect(run("monitor_start", { command: "echo x", wake_pattern: "(?=x)" })).rejects.toThrow(
      /^wake_pattern "\(\?=x\)" is not a valid RE2/,
    )
    await expect(run("monitor_start", { command: "echo x", wake_limit: 2 })).rejects.toThrow(
      /wake_limit needs a wake_pattern/,
    )
    await expect(run("monitor_start", { command: "echo x", wake_pattern: "x", wake_limit: 21 })).rejects.toThrow(
      /wake_limit must be an integer from 1 to 20/,
    )
  })

  test("monitor_list shows id, label, status and counters, never the raw command", async () => {
    const { run, instance } = plugin()
    await run("monitor_start", { command: "echo SECRET_TOKEN_123; sleep 30", label: "server" })
    // Counted as it is read: no need to wait for the flush that sends it.
    expect(await waitFor(() => instance.manager.list("ses_a", false)[0]?.counters.total === 1, 5_000)).toBe(true)
    const list = JSON.parse(await run("monitor_list", {}))
    expect(list.monitors).toHaveLength(1)
    expect(list.monitors[0]).toMatchObject({ label: "server", status: "running", counters: { total: 1, matched: 1 } })
    expect(JSON.stringify(list)).not.toContain("SECRET_TOKEN_123; sleep")
    expect(JSON.parse(await run("monitor_list", {}, toolContext("ses_other")))).toEqual({ monitors: [] })
  })

  test("monitor_stop returns the final status and does not wake the session", async () => {
    const marker = uniqueMarker("stop")
    const { run, api, instance } = plugin()
    const id = (await run("monitor_start", { command: `sleep 30 # ${marker}` })).match(/mon_[0-9a-f]{8}/)?.[0]
    await waitFor(() => liveProcesses(marker).length > 0, 2_000)
    const stopped = JSON.parse(await run("monitor_stop", { monitor_id: id }))
    expect(stopped.status).toBe("stopped")
    expect(liveProcesses(marker)).toEqual([])
    // The stop has returned after the monitor ended: a wake would be queued or sent by now.
    expect(api.sent.filter((p) => !p.noReply)).toEqual([])
    expect(instance.router.injector.pending("ses_a")).toEqual([])
  })

  test("monitor_output says more only while more lines are retained after the ones it returns", async () => {
    const { run, instance } = plugin()
    const id = (await run("monitor_start", { command: "seq 1 100" })).match(/mon_[0-9a-f]{8}/)?.[0] as string
    await waitFor(() => instance.manager.get("ses_a", id)?.status.kind !== "running", 5_000)
    const read = async (args: Record<string, unknown>) => {
      const { more, next_since_sequence } = JSON.parse(await run("monitor_output", { monitor_id: id, ...args }))
      return { more, next_since_sequence }
    }
    // Exactly the default limit of 100 lines is retained: all of them are returned, nothing is left.
    expect(await read({})).toEqual({ more: false, next_since_sequence: 100 })
    expect(await read({ limit: 99 })).toEqual({ more: true, next_since_sequence: 99 })
    expect(await read({ since_sequence: 99, limit: 1 })).toEqual({ more: false, next_since_sequence: 100 })
  })

  test("monitor_output reads filtered-out lines", async () => {
    const { run, instance } = plugin()
    const id = (
      await run("monitor_start", { command: "printf 'ok 1\\nERROR 2\\nok 3\\n'", match_pattern: "ERROR" })
    ).match(/mon_[0-9a-f]{8}/)?.[0] as string
    await waitFor(() => instance.manager.get("ses_a", id)?.status.kind !== "running", 3_000)
    const unmatched = JSON.parse(await run("monitor_output", { monitor_id: id, stream: "unmatched" }))
    expect(unmatched.lines.map((l: { text: string }) => l.text)).toEqual(["ok 1", "ok 3"])
    expect(unmatched.counters).toMatchObject({ total: 3, matched: 1, unmatched: 2 })
    const since = JSON.parse(await run("monitor_output", { monitor_id: id, since_sequence: 1, limit: 1 }))
    expect(since.lines.map((l: { seq: number }) => l.seq)).toEqual([2])
  })

  test("monitor_output returns 100 lines by default and up to limit 500; a limit outside 1-500 is refused", async () => {
    const { run, instance } = plugin()
    const id = (await run("monitor_start", { command: "seq 1 150" })).match(/mon_[0-9a-f]{8}/)?.[0] as string
    await waitFor(() => instance.manager.get("ses_a", id)?.status.kind !== "running", 5_000)
    const seqsOf = async (args: Record<string, unknown>) =>
      JSON.parse(await run("monitor_output", { monitor_id: id, ...args })).lines.map((l: { text: string }) => l.text)
    const first = await seqsOf({})
    expect([first.length, first[0], first.at(-1)]).toEqual([100, "1", "100"])
    expect((await seqsOf({ limit: 500 })).length).toBe(150)
    await expect(run("monitor_output", { monitor_id: id, limit: 0 })).rejects.toThrow("expected number to be >=1")
    await expect(run("monitor_output", { monitor_id: id, limit: 501 })).rejects.toThrow("expected number to be <=500")
  })

  test("monitor_list leaves an ended monitor out unless include_exited, then shows its exit and start time", async () => {
    const { run, instance } = plugin()
    const before = Date.now()
    const id = (await run("monitor_start", { command: "echo done" })).match(/mon_[0-9a-f]{8}/)?.[0] as string
    await waitFor(() => instance.manager.get("ses_a", id)?.status.kind !== "running", 3_000)
    expect(JSON.parse(await run("monitor_list", {}))).toEqual({ monitors: [] })
    const [listed] = JSON.parse(await run("monitor_list", { include_exited: true })).monitors
    expect(listed).toMatchObject({ monitor_id: id, status: "exited (code=0)", deadline: "none" })
    expect(listed.started_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    expect(Date.parse(listed.started_at)).toBeGreaterThanOrEqual(before - 1)
    expect(Date.parse(listed.started_at)).toBeLessThanOrEqual(Date.now())
  })

  test("an unknown or foreign monitor id is a thrown not_found MonitorError, like every other tool error", async () => {
    const { run, instance } = plugin()
    const id = (await run("monitor_start", { command: "echo done" })).match(/mon_[0-9a-f]{8}/)?.[0] as string
    await waitFor(() => instance.manager.get("ses_a", id)?.status.kind !== "running", 3_000)
    const attempts: Array<[string, string, string]> = [
      ["monitor_output", "mon_nope", "ses_a"],
      ["monitor_output", id, "ses_other"],
      ["monitor_stop", "mon_nope", "ses_a"],
      ["monitor_stop", id, "ses_other"],
    ]
    for (const [name, monitorId, session] of attempts) {
      const error = await run(name, { monitor_id: monitorId }, toolContext(session)).then(
        (result) => new Error(`${name} returned instead of throwing: ${result}`),
        (thrown: unknown) => thrown,
      )
      expect(error).toBeInstanceOf(MonitorError)
      expect(error).toMatchObject({ code: "not_found" })
      expect((error as Error).message).toBe(
        `No monitor ${JSON.stringify(monitorId)} in this session. monitor_list (include_exited: true) shows the ids you can use.`,
      )
    }
    // The monitor itself is untouched by a foreign session's stop.
    expect(instance.manager.get("ses_a", id)?.status.kind).toBe("exited")
  })

  test("session.deleted stops that session's monitors and no process is left", async () => {
    const marker = uniqueMarker("deleted")
    const { run, instance } = plugin()
    // `; :` keeps the marker in the shell's argv: bash would exec a lone `sleep` and drop a comment.
    await run("monitor_start", { command: `sleep 30; : ${marker}` }, toolContext("ses_gone"))
    await run("monitor_start", { command: `sleep 30; : ${marker}_keep` }, toolContext("ses_stays"))
    await waitFor(() => liveProcesses(marker).length >= 2, 2_000)
    await instance.hooks.event?.({ event: { type: "session.deleted", properties: { sessionID: "ses_gone" } } as never })
    const gone = () => liveProcesses(marker).filter((row) => !row.includes(`${marker}_keep`)).length === 0
    expect(await waitFor(gone, 2_000)).toBe(true)
    expect(liveProcesses(`${marker}_keep`)).toHaveLength(1)
    await instance.hooks.dispose?.()
    expect(liveProcesses(marker)).toEqual([])
  })

  test("compaction keeps the agent aware of running monitors", async () => {
    const { run, instance } = plugin()
    await run("monitor_start", { command: "sleep 30", label: "watcher" })
    const output = { context: [] as string[] }
    await instance.hooks["experimental.session.compacting"]?.({ sessionID: "ses_a" }, output)
    expect(output.context.join("\n")).toMatch(/mon_[0-9a-f]{8} \(watcher\)/)
    expect(output.context.join("\n")).toContain("monitor_stop")
  })
})
