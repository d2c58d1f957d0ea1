// test-runner: about 78 s (scripts/test.ts deals the unit files into two jobs by it)
import { describe, expect, test } from "bun:test"
import { type ChildProcess, spawn } from "node:child_process"
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { formatStatus } from "../src/codec"
import { defaultMonitorConfig, type MonitorConfig } from "../src/config"
import { MonitorError, type MonitorFields } from "../src/errors"
import { MonitorManager } from "../src/manager"
import { spawnInGroup } from "../src/process/process-group"
import { createProcessTable, type ProcessTable } from "../src/process/process-table"
import { createPsTable } from "../src/process/ps-table"
import { BatchCollector } from "./support/collect"
import { drive } from "./support/drive"
import { FakeScheduler } from "./support/fake-scheduler"
import { textsOf } from "./support/lines"
import { killWithChildren, liveProcesses, uniqueMarker, waitFor } from "./support/processes"
import { startMonitor } from "./support/start"
import { BACK_ENDS } from "./support/tables"

function manager(overrides: Partial<MonitorConfig> = {}, processTable?: ProcessTable) {
  const collector = new BatchCollector()
  const config = { ...defaultMonitorConfig(), kill_grace_ms: 300, ...overrides }
  const m = new MonitorManager(config, { onBatch: collector.onBatch, onEnded: collector.onEnded, processTable })
  return { m, collector }
}

/**
 * A stand-in server (support/host.ts) running these commands with this back end, once it printed
 * READY; `flags` go before the commands (`--shutdown-signals`). What it prints is kept in `output`.
 */
async function startHost(graceMs: number, table: ProcessTable, commands: string[], flags: string[] = []) {
  const host = spawn(
    process.execPath,
    [join(import.meta.dir, "support/host.ts"), String(graceMs), table.cheap ? "proc" : "ps", ...flags, ...commands],
    { stdio: ["ignore", "pipe", "inherit"] },
  )
  const output: string[] = []
  await new Promise<void>((resolve) =>
    host.stdout?.on("data", (d: Buffer) => output.push(d.toString()) && output.join("").includes("READY") && resolve()),
  )
  return { host, output }
}

/** Live processes naming `text` on their command line, other than the host (whose arguments name it too). */
const monitoredBy = (host: ChildProcess, text: string) =>
  liveProcesses(text)
    .map((row) => Number(row.trim().split(/\s+/)[0]))
    .filter((pid) => pid !== host.pid)

/** A `sleep` no other test runs: its duration is the marker (a shell may exec a lone command, dropping a comment). */
const uniqueSleep = () => `sleep ${1_000_000 + Math.floor(Math.random() * 8_999_999)}`

const start = (m: MonitorManager, command: string, sessionID = "s1", extra = {}) =>
  startMonitor(m, { sessionID, directory: process.cwd(), command, ...extra })

describe("a monitored process", () => {
  test("runs as leader of its own process group with stdin closed, in the given directory", async () => {
    const { m, collector } = manager()
    const info = await startMonitor(m, {
      sessionID: "s1",
      directory: "/tmp",
      command:
        'echo "pgid=$(ps -o pgid= -p $$ | tr -d " ") pid=$$"; pwd; read x && echo "stdin=$x" || echo stdin-closed',
    })
    await collector.whenEnded(info.id)
    const [ids, cwd, stdin] = collector.linesOf(info.id)
    const match = ids?.match(/pgid=(\d+) pid=(\d+)/)
    expect(match?.[1]).toBe(match?.[2] as string)
    expect(cwd).toBe("/tmp")
    expect(stdin).toBe("stdin-closed")
  })

  test("reports the exit code", async () => {
    const { m, collector } = manager()
    const info = await start(m, "exit 3")
    expect((await collector.whenEnded(info.id)).status).toEqual({ kind: "exited", code: 3 })
  })

  test("reports the real signal name of a signal death, never code 0", async () => {
    const { m, collector } = manager()
    const term = await start(m, "kill -TERM $$")
    const kill = await start(m, "kill -KILL $$")
    const segv = await start(m, "kill -SEGV $$")
    expect((await collector.whenEnded(term.id)).status).toEqual({ kind: "signaled", signal: "SIGTERM" })
    expect((await collector.whenEnded(kill.id)).status).toEqual({ kind: "signaled", signal: "SIGKILL" })
    expect((await collector.whenEnded(segv.id)).status).toEqual({ kind: "signaled", signal: "SIGSEGV" })
  })

  test("the runtime cap ends it and says so", async () => {
    const { m, collector } = manager()
    const info = await start(m, "echo started; sleep 30", "s1", { timeoutMs: 300 })
    const ended = await collector.whenEnded(info.id)
    expect(ended.status).toEqual({ kind: "timed_out", afterMs: 300, signal: "SIGTERM" })
    const terminal = collector.of(info.id).at(-1)
    expect(terminal?.stillRunning).toBe(false)
  })

  test("a command that ignores SIGTERM is killed after kill_grace_ms", async () => {
    const marker = uniqueMarker("ignore_term")
    const { m, collector } = manager({ kill_grace_ms: 200 })
    const info = await start(m, `trap '' TERM; sleep 30 # ${marker}`)
    await waitFor(() => liveProcesses(marker).length > 0, 2_000)
    const stopped = await m.stop("s1", info.id, "agent")
    expect(stopped?.info.status).toEqual({ kind: "stopped", signal: "SIGKILL" })
    expect(liveProcesses(marker)).toEqual([])
    await collector.whenEnded(info.id)
  })

  test("a command that cannot start says why", async () => {
    const { m } = manager()
    await expect(start(m, "definitely-not-a-program-xyz --flag")).rejects.toThrow(
      "Cannot start the command (definitely-not-a-program-xyz): definitely-not-a-program-xyz: command not found on PATH.",
    )
    await expect(startMonitor(m, { sessionID: "s1", directory: "/no/such/dir", command: "echo hi" })).rejects.toThrow(
      /cannot start sh in \/no\/such\/dir/,
    )
    await expect(start(m, "./not-here.sh")).rejects.toThrow(/not-here.sh does not exist or is not executable/)
  })

  test("a shell that cannot start is named in the error, not sh", async () => {
    const dir = mkdtempSync(join(tmpdir(), "omo-shell-"))
    try {
      await expect(
        spawnInGroup({ command: "echo hi", cwd: dir, killGraceMs: 100, shell: "/no/such/zsh" }),
      ).rejects.toThrow(`cannot start /no/such/zsh in ${dir}: the directory or /no/such/zsh does not exist`)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test("a command that sets PATH itself finds its program there (the README's advice for command not found)", async () => {
    const bin = mkdtempSync(join(tmpdir(), "omo-path-"))
    const tool = join(bin, "omo-path-probe-tool")
    writeFileSync(tool, "#!/bin/sh\necho found-on-my-path\n")
    chmodSync(tool, 0o755)
    try {
      const { m, collector } = manager()
      for (const command of [
        `PATH=${bin}:$PATH omo-path-probe-tool`,
        `env PATH=${bin}:/usr/bin:/bin omo-path-probe-tool`,
        `export PATH=${bin}:$PATH; omo-path-probe-tool`,
      ]) {
        const info = await start(m, command)
        await collector.whenEnded(info.id)
        expect({ command, lines: collector.linesOf(info.id) }).toEqual({ command, lines: ["found-on-my-path"] })
      }
      // Without it the server's PATH decides, and the start is refused up front.
      await expect(start(m, "omo-path-probe-tool")).rejects.toThrow(/omo-path-probe-tool: command not found on PATH/)
    } finally {
      rmSync(bin, { recursive: true, force: true })
    }
  })

  test("a start that fails carries its label and directory as fields, like execa's errors", async () => {
    const { m } = manager()
    const error = await startMonitor(m, {
      sessionID: "s1",
      directory: "/no/such/dir",
      command: "echo hi",
      label: "greeter",
    }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(MonitorError)
    expect((error as MonitorError).code).toBe("spawn_failed")
    expect((error as MonitorError).fields).toEqual({ label: "greeter", cwd: "/no/such/dir" })
  })

  test("an end is told with its fields: label, cwd, exit code and the stderr tail", async () => {
    const ends: MonitorFields[] = []
    const config = { ...defaultMonitorConfig(), kill_grace_ms: 300 }
    const m = new MonitorManager(config, { onBatch: () => {}, onEnded: (_info, end) => ends.push(end) })
    const info = await start(m, "echo out; echo first >&2; echo second >&2; exit 3")
    expect(await waitFor(() => ends.length === 1, 10_000)).toBe(true)
    expect(ends[0]).toEqual({
      label: "echo",
      cwd: process.cwd(),
      monitorId: info.id,
      exitCode: 3,
      stderrTail: ["first", "second"],
    })
    await m.shutdown()
  })

  test("raw spawn failures are named errors with the label: a file as directory, a command too long, a NUL byte", async () => {
    const { m } = manager()
    const failure = async (request: { command: string; directory?: string }) => {
      try {
        await startMonitor(m, {
          sessionID: "s1",
          directory: request.directory ?? process.cwd(),
          label: "job",
          command: request.command,
        })
      } catch (error) {
        return {
          name: (error as Error).name,
          code: (error as { code?: string }).code,
          message: (error as Error).message,
        }
      }
      return undefined
    }
    expect(await failure({ command: "echo hi", directory: "/etc/hostname" })).toEqual({
      name: "MonitorError",
      code: "spawn_failed",
      message: expect.stringMatching(
        /^Cannot start the command \(job\): cannot start sh in \/etc\/hostname: it is not a directory/,
      ),
    })
    // The longest command the permission check takes (128 KiB) is one byte more than Linux takes
    // as one argument, with its terminating NUL.
    expect(await failure({ command: `echo ${"x".repeat(128 * 1024 - 5)}` })).toEqual({
      name: "MonitorError",
      code: "spawn_failed",
      message: expect.stringMatching(
        /^Cannot start the command \(job\): the command and environment are longer than the system allows/,
      ),
    })
    expect(await failure({ command: "echo a\u0000b" })).toEqual({
      name: "MonitorError",
      code: "spawn_failed",
      message:
        "Cannot start the command (job): the command contains a NUL byte, which no shell can receive; remove it.",
    })
    expect(m.list("s1", true)).toEqual([])
  })
})

describe("the command's environment: runtimes that block-buffer a pipe are asked to flush per line", () => {
  /** The server's environment without PYTHONUNBUFFERED (this machine may set it), plus `extra`. */
  const serverEnv = (extra: NodeJS.ProcessEnv = {}) => {
    const { PYTHONUNBUFFERED: _, ...rest } = process.env
    return { ...rest, ...extra }
  }
  const withEnv = (env: NodeJS.ProcessEnv, overrides: Partial<MonitorConfig> = {}) => {
    const collector = new BatchCollector()
    const config = { ...defaultMonitorConfig(), kill_grace_ms: 300, flush_interval_ms: 250, ...overrides }
    const m = new MonitorManager(config, { onBatch: collector.onBatch, onEnded: collector.onEnded, env })
    return { m, collector }
  }
  const linesOf = async (env: NodeJS.ProcessEnv, command: string, overrides: Partial<MonitorConfig> = {}) => {
    const { m, collector } = withEnv(env, overrides)
    const info = await start(m, command)
    await collector.whenEnded(info.id)
    return collector.linesOf(info.id)
  }
  const probe = 'echo "PYTHONUNBUFFERED=[$(printenv PYTHONUNBUFFERED || echo unset)]"'

  test("by default the command sees PYTHONUNBUFFERED=1, and nothing else of its environment changes", async () => {
    expect(await linesOf(serverEnv(), probe)).toEqual(["PYTHONUNBUFFERED=[1]"])
    // The whole environment, with the option on and off: one variable apart (the token differs per run).
    const variables = async (on: boolean) =>
      (await linesOf(serverEnv(), "env", { unbuffered_runtimes: on }))
        .map((line) => line.replace(/^(OPENCODE_MONITOR_TOKEN=).*/, "$1<token>"))
        .sort()
    const off = await variables(false)
    expect(off).toContain("OPENCODE_MONITOR_TOKEN=<token>")
    expect(await variables(true)).toEqual([...off, "PYTHONUNBUFFERED=1"].sort())
  })

  test("a value the environment already sets is kept, an empty one too", async () => {
    expect(await linesOf(serverEnv({ PYTHONUNBUFFERED: "" }), probe)).toEqual(["PYTHONUNBUFFERED=[]"])
    expect(await linesOf(serverEnv({ PYTHONUNBUFFERED: "x" }), probe)).toEqual(["PYTHONUNBUFFERED=[x]"])
  })

  test("with unbuffered_runtimes: false the command does not see it", async () => {
    expect(await linesOf(serverEnv(), probe, { unbuffered_runtimes: false })).toEqual(["PYTHONUNBUFFERED=[unset]"])
  })

  test("a Python program's line arrives while it runs, not at its exit", async () => {
    const { m, collector } = withEnv(serverEnv())
    const info = await start(m, `python3 -c 'import time; print("ready"); time.sleep(30)'`)
    const arrived = await waitFor(() => collector.linesOf(info.id).includes("ready"), 8_000)
    const running = m.get("s1", info.id)?.status.kind
    await m.stop("s1", info.id, "agent")
    expect({ arrived, running }).toEqual({ arrived: true, running: "running" })
  }, 20_000)
})

describe("end of process", () => {
  test("a monitor that ended with nothing left running takes its watchdog with it", async () => {
    const { m, collector } = manager()
    for (const command of ["exit 0", `sleep 30; : ${uniqueMarker("disarm")}`]) {
      const info = await start(m, command)
      const leader = m.snapshot().find((s) => s.id === info.id)?.pid as number
      expect(leader).toBeGreaterThan(0)
      // The watchdog runs `sh -c <script> opencode-monitor-watchdog <leader pid> …`.
      const watchdog = `opencode-monitor-watchdog ${leader} `
      if (command !== "exit 0") {
        expect(liveProcesses(watchdog)).toHaveLength(1)
        await m.stop("s1", info.id, "agent")
      }
      await collector.whenEnded(info.id)
      expect(await waitFor(() => liveProcesses(watchdog).length === 0, 3_000)).toBe(true)
    }
  })

  // 200 real processes: about 5 s on a quiet machine, so the default per-test limit is too tight.
  test("every line arrives, then exactly one terminal batch, every time (200 runs)", async () => {
    const { m, collector } = manager({ max_monitors_per_session: 16 })
    const runs = 200
    let done = 0
    const failures: string[] = []
    const one = async () => {
      const info = await start(m, "printf 'a\\nb\\nno-newline-at-end'; exit 3", `s${done % 50}`)
      await collector.whenEnded(info.id)
      const batches = collector.of(info.id)
      const lines = batches.flatMap((b) => textsOf(b.lines))
      const terminal = batches.filter((b) => !b.stillRunning)
      const last = batches.at(-1)
      if (
        lines.join("|") !== "a|b|no-newline-at-end" ||
        terminal.length !== 1 ||
        last?.stillRunning !== false ||
        JSON.stringify(last.status) !== JSON.stringify({ kind: "exited", code: 3 })
      ) {
        failures.push(`${info.id}: ${JSON.stringify({ lines, batches: batches.length, terminal: terminal.length })}`)
      }
      done++
    }
    // Eight at a time, to race the pipes against the exit as a busy server would.
    for (let i = 0; i < runs; i += 8) await Promise.all(Array.from({ length: 8 }, one))
    expect(failures).toEqual([])
    expect(done).toBe(runs)
  }, 30_000)

  test("a quiet exit after the periodic flush still yields the terminal batch with the status", async () => {
    const { m, collector } = manager({ flush_interval_ms: 250 })
    const info = await start(m, "echo QA_BUILD_LINE; sleep 1; exit 7")
    await collector.whenEnded(info.id)
    const batches = collector.of(info.id)
    expect(batches.map((b) => [b.batchSeq, textsOf(b.lines), b.stillRunning])).toEqual([
      [1, ["QA_BUILD_LINE"], true],
      [2, [], false],
    ])
    expect(batches[1]?.status).toEqual({ kind: "exited", code: 7 })
  })

  test("the seed's QA command: sh -c 'echo QA_BUILD_LINE; sleep 3; exit 7'", async () => {
    const { m, collector } = manager()
    const info = await start(m, "sh -c 'echo QA_BUILD_LINE; sleep 3; exit 7'")
    await collector.whenEnded(info.id)
    const batches = collector.of(info.id)
    expect(batches.flatMap((b) => textsOf(b.lines))).toEqual(["QA_BUILD_LINE"])
    expect(batches.filter((b) => !b.stillRunning)).toHaveLength(1)
    expect(batches.at(-1)?.status).toEqual({ kind: "exited", code: 7 })
  }, 10_000)

  test("a grandchild holding the pipe open does not hold back the terminal batch for long", async () => {
    const marker = uniqueMarker("pipe_holder")
    const { m, collector } = manager()
    const began = Date.now()
    const info = await start(m, `sleep 1000 & # ${marker}\necho tail-line; exit 4`)
    const ended = await collector.whenEnded(info.id)
    const { leftBehind, ...status } = ended.status as { leftBehind?: { name: string }[] }
    expect(status).toEqual({ kind: "exited", code: 4 })
    expect(leftBehind?.map((p) => p.name)).toEqual(["sleep"])
    expect(collector.linesOf(info.id)).toEqual(["tail-line"])
    expect(Date.now() - began).toBeLessThan(5_000)
    expect(liveProcesses(marker)).toEqual([])
  })
})

describe.each(BACK_ENDS)("processes that leave the process group, tracked through %s", (_name, table) => {
  const running = (marker: string) => liveProcesses(marker).length > 0

  /**
   * A process outside the monitor that spells its token in its arguments, its environment clean:
   * what a carrier's environment would hold, where no search may take it for one.
   */
  async function spelling(leaderMarker: string, marker: string): Promise<void> {
    const tokenOf = (row: string) => {
      const environ = `/proc/${row.trim().split(/\s+/)[0]}/environ`
      return /OPENCODE_MONITOR_TOKEN=([0-9a-f]+)/.exec(readFileSync(environ, "latin1"))?.[1]
    }
    const found = () => liveProcesses(leaderMarker).map(tokenOf).find(Boolean)
    expect(await waitFor(() => found() !== undefined, 3_000)).toBe(true)
    const token = found()
    const { OPENCODE_MONITOR_TOKEN: _none, ...clean } = process.env
    const child = spawn("sh", ["-c", `sleep 1000; : ${marker}`, "sh", `OPENCODE_MONITOR_TOKEN=${token}`], {
      detached: true,
      stdio: "ignore",
      env: clean,
    })
    child.unref()
    // Its shell names the marker (its sleep does not).
    expect(await waitFor(() => liveProcesses(marker).length === 1, 3_000)).toBe(true)
  }

  test("a process spelling the monitor's token only in its arguments survives its stop and its end", async () => {
    const { m, collector } = manager({}, table)
    const [stopped, exiting, bystander] = ["spell_stop", "spell_exit", "spell_by"].map(uniqueMarker) as [
      string,
      string,
      string,
    ]
    try {
      const a = await start(m, `sleep 1000; : ${stopped}`)
      await spelling(stopped, `${bystander}_a`)
      await m.stop("s1", a.id, "agent")
      expect((await collector.whenEnded(a.id)).status).toEqual({ kind: "stopped", signal: "SIGTERM" })
      const b = await start(m, `sleep 2; : ${exiting}`)
      await spelling(exiting, `${bystander}_b`)
      expect((await collector.whenEnded(b.id)).status).toEqual({ kind: "exited", code: 0 })
      expect(liveProcesses(bystander)).toHaveLength(2)
    } finally {
      for (const row of liveProcesses(bystander)) killWithChildren(Number(row.trim().split(/\s+/)[0]))
    }
  }, 15_000)

  test("a SIGKILL of the host spares a process spelling the monitor's token only in its arguments", async () => {
    const sleep = uniqueSleep()
    const bystander = uniqueMarker("spell_host")
    const { host } = await startHost(300, table, [`${sleep}; :`])
    try {
      await spelling(sleep, bystander)
      host.kill("SIGKILL")
      expect(await waitFor(() => monitoredBy(host, sleep).length === 0, 3_000)).toBe(true)
      // Past the watchdog's grace and its KILL round.
      await new Promise((r) => setTimeout(r, 600))
      expect(liveProcesses(bystander)).toHaveLength(1)
    } finally {
      host.kill("SIGKILL")
      for (const row of liveProcesses(bystander)) killWithChildren(Number(row.trim().split(/\s+/)[0]))
    }
  }, 15_000)

  test("stop also kills group members left running after the leader exited", async () => {
    const marker = uniqueMarker("leftover")
    const { m, collector } = manager({}, table)
    const info = await start(m, `sh -c 'sleep 1000 # ${marker}' & echo leader-done; exit 0`)
    const ended = await collector.whenEnded(info.id)
    // What it left running was stopped, and the status says so.
    const { leftBehind, ...status } = ended.status as { leftBehind?: { name: string }[] }
    expect(status).toEqual({ kind: "exited", code: 0 })
    expect(leftBehind?.map((p) => p.name).sort()).toEqual(["sh", "sleep"])
    expect(collector.linesOf(info.id)).toEqual(["leader-done"])
    expect(liveProcesses(marker)).toEqual([])
  })

  test("a SIGKILL of the host process leaves no monitored process running within kill_grace_ms + 2 s", async () => {
    // A unique sleep, not a comment: a shell may exec a lone command and drop the comment.
    const sleep = uniqueSleep()
    const graceMs = 300
    const { host } = await startHost(graceMs, table, [sleep, `trap '' TERM; ${sleep}`])
    try {
      // The first leader execs into its sleep; the second (a shell ignoring TERM) and its sleep.
      expect(await waitFor(() => monitoredBy(host, sleep).length >= 3, 3_000)).toBe(true)
      host.kill("SIGKILL")
      const killedAt = Date.now()
      expect(await waitFor(() => monitoredBy(host, sleep).length === 0, graceMs + 2_000)).toBe(true)
      expect(Date.now() - killedAt).toBeLessThan(graceMs + 2_000)
    } finally {
      host.kill("SIGKILL")
      for (const pid of monitoredBy(host, sleep)) killWithChildren(pid)
    }
  })

  test.each([
    ["setsid", (m: string) => `setsid sh -c 'sleep 1000; : ${m}'`],
    ["setpgrp", (m: string) => `perl -e 'setpgrp(0, 0); sleep 1000' ${m}`],
    ["double fork into a new session", (m: string) => `setsid sh -c 'sh -c "sleep 1000; : ${m}" & sleep 0.3'`],
    [
      "a classic double fork (the middle process exits at once)",
      (m: string) => `setsid sh -c 'sh -c "sleep 1000; : ${m}" & exit 0'`,
    ],
    // No token to find it by: only following the tree (seen attached) stops it.
    ["setsid with a cleared environment", (m: string) => `setsid env -i sh -c 'sleep 1000; : ${m}'`],
  ])("a child that escapes by %s is stopped with the monitor", async (_name, command) => {
    const marker = uniqueMarker("escape")
    const { m, collector } = manager({}, table)
    const info = await start(m, `${command(marker)} >/dev/null 2>&1 & sleep 1000; : ${marker}`)
    expect(await waitFor(() => liveProcesses(marker).length >= 2, 3_000)).toBe(true)
    await new Promise((r) => setTimeout(r, 500))
    const stopped = await m.stop("s1", info.id, "agent")
    expect(liveProcesses(marker)).toEqual([])
    expect(stopped?.info.status).toEqual({ kind: "stopped", signal: "SIGTERM" })
    await collector.whenEnded(info.id)
  })

  test("an escaped daemon is stopped when its session is deleted and on shutdown", async () => {
    const gone = uniqueMarker("escape_gone")
    const other = uniqueMarker("escape_other")
    const { m } = manager({}, table)
    await start(m, `setsid sh -c 'sleep 1000; : ${gone}' >/dev/null 2>&1 & sleep 1000`, "gone")
    await start(m, `setsid sh -c 'sleep 1000; : ${other}' >/dev/null 2>&1 & sleep 1000`, "other")
    expect(await waitFor(() => running(gone) && running(other), 3_000)).toBe(true)
    await new Promise((r) => setTimeout(r, 300))
    await m.stopSession("gone")
    expect(liveProcesses(gone)).toEqual([])
    expect(running(other)).toBe(true)
    await m.shutdown()
    expect(liveProcesses(other)).toEqual([])
  })

  test("a leader that exits at once leaves no escaped pipe holder behind a clean exit status (6 runs)", async () => {
    const { m, collector } = manager({ max_monitors_per_session: 16 }, table)
    const outcomes: string[] = []
    for (let i = 0; i < 6; i++) {
      const marker = uniqueMarker("held")
      // The child leaves the session at once and the leader exits at once: it may be gone from
      // the tree before any tracking tick sees it, while it still holds stdout.
      const info = await start(m, `setsid sh -c 'sleep 30; : ${marker}' & exit 0`)
      const ended = await collector.whenEnded(info.id)
      const left = liveProcesses(marker)
      for (const row of left) killWithChildren(Number(row.trim().split(/\s+/)[0]))
      const status = ended.status as { pipesHeld?: boolean }
      // Either it was found and stopped (nothing left), or the status says the pipes were held.
      if (left.length > 0 && status.pipesHeld !== true) outcomes.push(`clean status with ${left.length} holder(s) left`)
      else outcomes.push(status.pipesHeld ? "said so" : "stopped")
      if (status.pipesHeld) expect(formatStatus(ended.status)).toContain("kept the output pipes open")
    }
    console.log("pipe holder outcomes:", outcomes.join(", "))
    expect(outcomes.filter((o) => o.startsWith("clean status"))).toEqual([])
  }, 60_000)

  test("a SIGKILL of the host also stops children that left the group, seen attached or not", async () => {
    const marker = uniqueMarker("host_kill_escape")
    const graceMs = 300
    const { host } = await startHost(graceMs, table, [
      `setsid sh -c 'sleep 1000; : ${marker}' >/dev/null 2>&1 & sleep 1000`,
      `setsid sh -c 'sh -c "sleep 1000; : ${marker}" & exit 0' >/dev/null 2>&1 & sleep 1000`,
    ])
    expect(await waitFor(() => liveProcesses(marker).length >= 2, 3_000)).toBe(true)
    // Give the tracker a few ticks to see the child and name it to the watchdog.
    await new Promise((r) => setTimeout(r, 500))
    host.kill("SIGKILL")
    expect(await waitFor(() => !running(marker), graceMs + 3_000)).toBe(true)
  })

  test("a SIGKILL of the host stops a child seen attached that then left the session and dropped the token", async () => {
    // No token to search for: only its pid and start time, told to the watchdog, reach it.
    const sleep = uniqueSleep()
    const graceMs = 300
    const { host } = await startHost(graceMs, table, [
      `setsid env -i sh -c '${sleep}; :' >/dev/null 2>&1 & ${sleep}; :`,
    ])
    try {
      // The leader and its sleep, the escaped shell and its sleep.
      expect(await waitFor(() => monitoredBy(host, sleep).length >= 4, 3_000)).toBe(true)
      // The escaped shell leads a session of its own (as the leader does) and has no token.
      const escaped = monitoredBy(host, sleep).filter((pid) => {
        const [, ppid, , sid] = readFileSync(`/proc/${pid}/stat`, "latin1").split(") ")[1]?.split(" ") ?? []
        return Number(sid) === pid && Number(ppid) !== host.pid
      })
      expect(escaped).toHaveLength(1)
      expect(readFileSync(`/proc/${escaped[0]}/environ`, "latin1")).not.toContain("OPENCODE_MONITOR_TOKEN")
      // Seen attached: a tracking tick (every 200 ms) found it and named it to the watchdog.
      await new Promise((r) => setTimeout(r, 1_000))
      host.kill("SIGKILL")
      expect(await waitFor(() => monitoredBy(host, sleep).length === 0, graceMs + 3_000)).toBe(true)
    } finally {
      host.kill("SIGKILL")
      for (const pid of monitoredBy(host, sleep)) killWithChildren(pid)
    }
  }, 10_000)

  test.each(["SIGTERM", "SIGINT", "SIGHUP"] as const)(
    "%s to the server stops the monitored processes, escaped ones too, while it still runs",
    async (signal) => {
      const sleep = uniqueSleep()
      const { host, output } = await startHost(
        300,
        table,
        [`${sleep}; :`, `setsid sh -c '${sleep}; :' >/dev/null 2>&1 & ${sleep}; :`],
        ["--shutdown-signals"],
      )
      try {
        expect(await waitFor(() => monitoredBy(host, sleep).length >= 6, 3_000)).toBe(true)
        await new Promise((r) => setTimeout(r, 500))
        host.kill(signal)
        // The plugin's handler stopped them: the server is alive, so its watchdogs never fired.
        expect(await waitFor(() => monitoredBy(host, sleep).length === 0, 2_000)).toBe(true)
        expect(await waitFor(() => output.join("").includes(`GOT ${signal}`), 2_000)).toBe(true)
        expect({ exitCode: host.exitCode, signalCode: host.signalCode }).toEqual({ exitCode: null, signalCode: null })
      } finally {
        host.kill("SIGKILL")
        for (const pid of monitoredBy(host, sleep)) killWithChildren(pid)
      }
    },
    10_000,
  )
})

describe("ended monitors kept for monitor_list and monitor_output", () => {
  const ids = (m: MonitorManager, session: string) => m.list(session, true).map((i) => i.id)
  const run = async (m: MonitorManager, collector: BatchCollector, session = "s1") => {
    const info = await start(m, "exit 0", session)
    await collector.whenEnded(info.id)
    return info
  }

  test("one is forgotten retained_max_age_ms (1000, the least allowed) after it ended", async () => {
    const scheduler = new FakeScheduler()
    const collector = new BatchCollector()
    const m = new MonitorManager(
      { ...defaultMonitorConfig(), retained_max_age_ms: 1_000 },
      { onBatch: collector.onBatch, onEnded: collector.onEnded, scheduler },
    )
    const info = await start(m, "exit 0")
    await drive(scheduler, collector.whenEnded(info.id), { stepMs: 0 })
    scheduler.advance(999)
    expect(ids(m, "s1")).toEqual([info.id])
    scheduler.advance(1)
    expect(ids(m, "s1")).toEqual([])
    expect(m.output("s1", info.id, { limit: 10 })).toBeUndefined()
  })

  test("retained_max_monitors counts across sessions: with 2, the oldest-ended of 3 sessions is gone", async () => {
    const { m, collector } = manager({ retained_max_monitors: 2 })
    const a = await run(m, collector, "a")
    const b = await run(m, collector, "b")
    const c = await run(m, collector, "c")
    expect([ids(m, "a"), ids(m, "b"), ids(m, "c")]).toEqual([[], [b.id], [c.id]])
    expect(m.get("a", a.id)).toBeUndefined()
  })

  test("at most 10 per session: of 12 ended monitors the two oldest are gone", async () => {
    const { m, collector } = manager()
    const started: string[] = []
    for (let i = 0; i < 12; i++) started.push((await run(m, collector)).id)
    expect(ids(m, "s1")).toEqual(started.slice(2))
  })
})

/** Kills what a test left running (after a failure), found by its marker. */
const cleanUp = (marker: string) => {
  for (const row of liveProcesses(marker)) killWithChildren(Number(row.trim().split(/\s+/)[0]))
}

describe("a pipe holder that left the session with its environment cleared, as the leader exits", () => {
  const holder = (marker: string) => `setsid env -i sh -c 'sleep 30; : ${marker}' & exit 0`

  test("without /proc and lsof nothing can find it: the status says the pipes were held", async () => {
    const marker = uniqueMarker("held_no_lsof")
    const { m, collector } = manager({}, createPsTable({ lsof: "/nonexistent/lsof" }))
    try {
      const info = await start(m, holder(marker))
      const ended = await collector.whenEnded(info.id)
      expect(ended.status).toEqual({ kind: "exited", code: 0, pipesHeld: true })
      expect(formatStatus(ended.status)).toContain(
        "exited (code=0); a process outside the monitor's reach kept the output pipes open after the command ended",
      )
      expect(liveProcesses(marker)).toHaveLength(1)
    } finally {
      cleanUp(marker)
    }
  })

  test("with /proc it is found holding the pipes, stopped, and named in the status", async () => {
    const marker = uniqueMarker("held_proc")
    const { m, collector } = manager({}, createProcessTable("proc"))
    try {
      // The leader lives long enough for its pipes to be read at the start (one that exits at once
      // may be gone before, and then the status says the pipes were held, as above), and the
      // holder lives in the tree only between two tracking ticks: only the pipe search finds it.
      const info = await start(m, `sleep 0.3; ${holder(marker)}`)
      const ended = await collector.whenEnded(info.id)
      const { leftBehind, ...status } = ended.status as { leftBehind?: { name: string }[] }
      expect(status).toEqual({ kind: "exited", code: 0 })
      expect(leftBehind?.map((p) => p.name).sort()).toEqual(["sh", "sleep"])
      expect(liveProcesses(marker)).toEqual([])
    } finally {
      cleanUp(marker)
    }
  })
})

describe("an orphan still in the command's session (/proc)", () => {
  test("a child that moved to its own group with a cleared environment is adopted at stop by its session id", async () => {
    const marker = uniqueMarker("session_orphan")
    const { m, collector } = manager({}, createProcessTable("proc"))
    try {
      // Its parent exits at once: it is gone from the tree before a tracking tick, in no group of
      // the monitor and without the token; only its session id still ties it to the command.
      const info = await start(
        m,
        `sh -c 'env -i perl -e "setpgrp(0, 0); sleep 1000" ${marker} >/dev/null 2>&1 &'; sleep 1000`,
      )
      expect(await waitFor(() => liveProcesses(marker).length > 0, 3_000)).toBe(true)
      const stopped = await m.stop("s1", info.id, "agent")
      expect(liveProcesses(marker)).toEqual([])
      expect(stopped?.info.status).toEqual({ kind: "stopped", signal: "SIGTERM" })
      await collector.whenEnded(info.id)
    } finally {
      cleanUp(marker)
    }
  })
})
