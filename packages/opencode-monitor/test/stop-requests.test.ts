// test-runner: about 5 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { spawnSync } from "node:child_process"
import {
  chmodSync,
  existsSync,
  lutimesSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { defaultMonitorConfig } from "../src/config"
import { createMonitorPlugin } from "../src/plugin"
import { projectStateDir } from "../src/state/format"
import {
  newScanMemory,
  parseStopRequest,
  STOP_REQUEST_STALE_MS,
  scanStopRequests,
  stopRequestDir,
  watchStopRequests,
  writeStopRequest,
} from "../src/state/stop-requests"
import { drive } from "./support/drive"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi } from "./support/fake-session-api"
import { liveProcesses, uniqueMarker, waitFor } from "./support/processes"
import { startMonitor } from "./support/start"
import { stretchCounter } from "./support/stretches"
import { swapForSymlink } from "./support/swap"

/** Writing thousands of files takes seconds on a loaded 2-core machine. */
const FLOOD_TIMEOUT_MS = 60_000

const roots: string[] = []
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true })
})

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "omo-stop-"))
  roots.push(dir)
  return dir
}

/** What a watcher keeps across its passes. */
const memory = newScanMemory

function recorder(serverPid: number, owned: string[] = [], now = () => 1_000_000) {
  const calls: string[] = []
  return {
    calls,
    handler: {
      serverPid,
      now,
      owns: (_sessionID: string, monitorId: string) => owned.includes(monitorId),
      stop(sessionID: string, monitorId: string) {
        calls.push(`${sessionID}/${monitorId}`)
      },
    },
  }
}

/** A request name as the TUI makes it: `stop-<server pid>-<12 hex>.json`. */
const requestName = (serverPid: number, n: number) => `stop-${serverPid}-${n.toString(16).padStart(12, "0")}.json`
const requestBody = (serverPid: number, monitorId: string, requestedAt = Date.now()) =>
  JSON.stringify({ format: "opencode-monitor/stop@1", serverPid, sessionID: "ses_1", monitorId, requestedAt })

describe("stop requests between the TUI part and the server part", () => {
  test("a request is written atomically and read back whole", () => {
    const dir = tempDir()
    const path = writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_a" }, 123)
    expect(readdirSync(stopRequestDir(dir))).toEqual([path.slice(path.lastIndexOf("/") + 1)])
    const text = require("node:fs").readFileSync(path, "utf8")
    expect(JSON.parse(text).format).toBe("opencode-monitor/stop@1")
    expect(parseStopRequest(text)).toEqual({
      serverPid: 7,
      sessionID: "ses_1",
      monitorId: "mon_a",
      requestedAt: 123,
    })
  })

  test("the addressed server takes its requests and removes them; another server's requests stay", async () => {
    const dir = tempDir()
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_a" }, 1_000_000)
    writeStopRequest(dir, { serverPid: 8, sessionID: "ses_1", monitorId: "mon_b" }, 1_000_000)
    const seven = recorder(7, ["mon_a"])
    expect(await scanStopRequests(dir, seven.handler)).toBe(1)
    expect(seven.calls).toEqual(["ses_1/mon_a"])
    expect(readdirSync(stopRequestDir(dir))).toHaveLength(1)
    const eight = recorder(8, ["mon_b"])
    expect(await scanStopRequests(dir, eight.handler)).toBe(1)
    expect(readdirSync(stopRequestDir(dir))).toEqual([])
  })

  test("a request for a monitor this instance does not run is left for the instance that does", async () => {
    const dir = tempDir()
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_b" }, 1_000_000)
    const first = recorder(7, ["mon_a"])
    expect(await scanStopRequests(dir, first.handler)).toBe(0)
    expect(first.calls).toEqual([])
    expect(readdirSync(stopRequestDir(dir))).toHaveLength(1)
    const second = recorder(7, ["mon_b"])
    expect(await scanStopRequests(dir, second.handler)).toBe(1)
    expect(second.calls).toEqual(["ses_1/mon_b"])
    expect(readdirSync(stopRequestDir(dir))).toEqual([])
  })

  test("a request nobody owns is ignored, and removed once stale", async () => {
    const dir = tempDir()
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_gone" }, 1_000_000)
    expect(await scanStopRequests(dir, recorder(7, []).handler)).toBe(0)
    expect(readdirSync(stopRequestDir(dir))).toHaveLength(1)
    expect(await scanStopRequests(dir, recorder(7, [], () => 1_000_000 + STOP_REQUEST_STALE_MS + 1).handler)).toBe(0)
    expect(readdirSync(stopRequestDir(dir))).toEqual([])
  })

  test("unparsable requests are ignored, and removed only once old; stale ones of a vanished server go, a temp file in progress stays", async () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    const vanished = writeStopRequest(
      dir,
      { serverPid: 9, sessionID: "s", monitorId: "mon_old" },
      Date.now() - STOP_REQUEST_STALE_MS - 1,
    )
    // Another server's request is not opened: its file's age tells that nobody took it.
    const minuteAgo = (Date.now() - STOP_REQUEST_STALE_MS - 1_000) / 1000
    utimesSync(vanished, minuteAgo, minuteAgo)
    writeStopRequest(dir, { serverPid: 9, sessionID: "s", monitorId: "mon_new" }, Date.now())
    const [bad, other, temp] = [requestName(7, 1), requestName(7, 2), `${requestName(9, 3)}.0000000a.tmp`]
    for (const [name, text] of [
      [bad, "{ not json"],
      [other, JSON.stringify({ format: "something/else", serverPid: 7 })],
      [temp, "{"],
    ] as const)
      writeFileSync(join(folder, name), text, { mode: 0o600 })
    const errors: string[] = []
    const seven = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    expect(await scanStopRequests(dir, seven)).toBe(0)
    const left = readdirSync(folder).sort()
    expect(left).toHaveLength(4)
    expect(left).toContain(bad)
    expect(left).toContain(other)
    expect(errors).toHaveLength(1)
    expect(errors[0]).toContain("2 not a stop request")
    // Long after: old unparsable regular files of the user's named as requests, and the abandoned temp file go.
    const old = (Date.now() - STOP_REQUEST_STALE_MS * 2) / 1000
    for (const name of [bad, other, temp]) utimesSync(join(folder, name), old, old)
    await scanStopRequests(dir, recorder(7, [], () => Date.now()).handler)
    expect(readdirSync(folder)).toHaveLength(1)
  })

  test("a symlinked stop-requests folder is never followed: nothing in its target is read or deleted (repro T3)", async () => {
    const dir = tempDir()
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const target = tempDir()
    const names = ["package.json", requestName(7, 1), `${requestName(7, 2)}.0000000a.tmp`]
    for (const name of names) writeFileSync(join(target, name), "{}", { mode: 0o600 })
    const old = (Date.now() - STOP_REQUEST_STALE_MS * 2) / 1000
    for (const name of names) utimesSync(join(target, name), old, old)
    symlinkSync(target, stopRequestDir(dir))
    const errors: string[] = []
    const handler = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    const kept = memory()
    for (let i = 0; i < 3; i++) await scanStopRequests(dir, handler, kept)
    expect(readdirSync(target).sort()).toEqual(names.sort())
    expect(errors).toHaveLength(1)
    expect(errors[0]).toContain("is a symbolic link, not a folder")
  })

  test("a request someone else could write is refused: a 0644 file, a 0755 folder, a FIFO, a symlink, a huge file (repro T2)", async () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_real" })
    expect((statSync(folder).mode & 0o777).toString(8)).toBe("700")
    const [wide, fifo, link, huge] = [1, 2, 3, 4].map((n) => requestName(7, n)) as [string, string, string, string]
    writeFileSync(join(folder, wide), requestBody(7, "mon_wide"), { mode: 0o644 })
    spawnSync("mkfifo", [join(folder, fifo)])
    writeFileSync(join(dir, "elsewhere.json"), requestBody(7, "mon_link"), { mode: 0o600 })
    symlinkSync(join(dir, "elsewhere.json"), join(folder, link))
    // A valid request of the future, 64 KB of padding: never read, whatever its date.
    writeFileSync(join(folder, huge), `${requestBody(7, "mon_huge")}${" ".repeat(64 * 1024)}`, { mode: 0o600 })
    const all = ["mon_real", "mon_wide", "mon_fifo", "mon_link", "mon_huge"]
    const seven = recorder(7, all, () => Date.now())
    // A FIFO with no writer would block a plain read forever: the test would time out.
    expect(await scanStopRequests(dir, seven.handler)).toBe(1)
    expect(seven.calls).toEqual(["ses_1/mon_real"])
    expect(readdirSync(folder).sort()).toEqual([wide, fifo, link, huge].sort())
    expect(existsSync(join(dir, "elsewhere.json"))).toBe(true)
    // The folder itself open to others: nothing in it is taken.
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_real" })
    chmodSync(folder, 0o755)
    expect(await scanStopRequests(dir, recorder(7, all, () => Date.now()).handler)).toBe(0)
  })

  test("stale cleanup deletes only old regular 0600 files of the user's named as requests: an old FIFO, symlink, folder, 0644/0666 file or other name stays", async () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    writeStopRequest(dir, { serverPid: 9, sessionID: "s", monitorId: "mon_other" })
    // Unparsable: each would be removed once old, were it a regular 0600 file of the user's named as a request.
    const name = (n: number) => requestName(7, n)
    writeFileSync(join(folder, name(1)), "{ not json", { mode: 0o600 })
    writeFileSync(join(folder, "stop-bad.json"), "{ not json", { mode: 0o600 })
    for (const [n, mode] of [
      [2, 0o644],
      [3, 0o666],
    ] as const) {
      writeFileSync(join(folder, name(n)), "{ not json", { mode })
      chmodSync(join(folder, name(n)), mode)
    }
    expect(spawnSync("mkfifo", [join(folder, name(4))]).status).toBe(0)
    expect(spawnSync("mkfifo", [join(folder, `${name(5)}.0000000a.tmp`)]).status).toBe(0)
    writeFileSync(join(dir, "elsewhere.json"), "{ not json", { mode: 0o600 })
    symlinkSync(join(dir, "elsewhere.json"), join(folder, name(6)))
    symlinkSync(join(dir, "elsewhere.json"), join(folder, `${name(7)}.0000000a.tmp`))
    mkdirSync(join(folder, name(8)))
    const old = (Date.now() - STOP_REQUEST_STALE_MS * 2) / 1000
    for (const entry of readdirSync(folder)) lutimesSync(join(folder, entry), old, old)
    utimesSync(join(dir, "elsewhere.json"), old, old)
    const errors: string[] = []
    const seven = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    expect(await scanStopRequests(dir, seven)).toBe(0)
    // The old request of a vanished server and the old unparsable 0600 request go; nothing else.
    expect(readdirSync(folder).sort()).toEqual(
      [
        name(2),
        name(3),
        name(4),
        `${name(5)}.0000000a.tmp`,
        name(6),
        `${name(7)}.0000000a.tmp`,
        name(8),
        "stop-bad.json",
      ].sort(),
    )
    expect(existsSync(join(dir, "elsewhere.json"))).toBe(true)
    expect(errors).toHaveLength(1)
    expect(errors[0]).toContain("5 untrusted")
    expect(errors[0]).toContain("1 not named as a stop request (e.g. stop-bad.json)")
  })

  test("a request over the 4 KiB bound is refused and left; one of exactly 4 KiB is taken", async () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    mkdirSync(folder, { mode: 0o700 })
    const padded = (n: number, monitorId: string, bytes: number) => {
      const body = requestBody(7, monitorId)
      writeFileSync(join(folder, requestName(7, n)), body + " ".repeat(bytes - body.length), { mode: 0o600 })
    }
    padded(1, "mon_over", 4_097)
    const errors: string[] = []
    const over = recorder(7, ["mon_over"], () => Date.now())
    expect(await scanStopRequests(dir, { ...over.handler, onError: (m: string) => errors.push(m) })).toBe(0)
    expect(over.calls).toEqual([])
    expect(readdirSync(folder)).toEqual([requestName(7, 1)])
    expect(errors).toEqual([
      `skipping entries of the stop-requests folder ${folder}: 1 untrusted (e.g. ${requestName(7, 1)}: too large (4097 bytes, bound 4096))`,
    ])
    padded(2, "mon_at", 4_096)
    const at = recorder(7, ["mon_at"], () => Date.now())
    expect(await scanStopRequests(dir, at.handler)).toBe(1)
    expect(at.calls).toEqual(["ses_1/mon_at"])
  })

  test("no folder: nothing to do, nothing created", async () => {
    const dir = join(tempDir(), "absent")
    expect(await scanStopRequests(dir, recorder(7).handler)).toBe(0)
    const stop = watchStopRequests(dir, { ...recorder(7).handler, scheduler: new FakeScheduler() }, 50)
    stop()
    expect(existsSync(dir)).toBe(false)
  })

  test("the watcher finds a request made after it started, even when the folder did not exist yet", async () => {
    const dir = tempDir()
    const scheduler = new FakeScheduler()
    const seven = recorder(7, ["mon_a"], () => scheduler.now())
    const stop = watchStopRequests(dir, { ...seven.handler, scheduler }, 100)
    try {
      writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_a" }, scheduler.now())
      // The folder is read off the event loop: the poll's clock moves while the pass runs.
      const found = await waitFor(() => {
        scheduler.advance(100)
        return seven.calls.length === 1
      }, 5_000)
      expect([found, seven.calls]).toEqual([true, ["ses_1/mon_a"]])
    } finally {
      stop()
    }
  })
})

describe("a stop from the TUI is a person's stop", () => {
  test("the owning server ends the process group; the agent is told by an observation, not woken", async () => {
    const root = tempDir()
    const env = { ...process.env, XDG_STATE_HOME: root }
    const api = new FakeSessionApi(Date.now)
    const marker = uniqueMarker("person_stop")
    const instance = createMonitorPlugin(
      { ...defaultMonitorConfig(), kill_grace_ms: 300 },
      { api, directory: root, env },
    )
    try {
      const started = await startMonitor(instance.manager, {
        sessionID: "ses_1",
        directory: root,
        command: `echo ready; sleep 30; : ${marker}`,
        label: "long",
      })
      expect(await waitFor(() => liveProcesses(marker).length > 0, 5_000)).toBe(true)
      writeStopRequest(projectStateDir(root, env), {
        serverPid: process.pid,
        sessionID: "ses_1",
        monitorId: started.id,
      })
      expect(await waitFor(() => instance.manager.get("ses_1", started.id)?.status.kind === "stopped", 10_000)).toBe(
        true,
      )
      expect(liveProcesses(marker)).toEqual([])
      const info = instance.manager.get("ses_1", started.id)
      expect(info?.ending).toEqual({ reason: "stop", by: "person" })
      expect(await waitFor(() => api.sent.some((p) => p.text.includes("Status: stopped")), 5_000)).toBe(true)
      const terminal = api.sent.filter((p) => p.text.includes("Status: stopped"))
      expect(terminal).toHaveLength(1)
      expect(terminal[0]?.text).toContain("Status: stopped (by the person at the screen)")
      expect(api.sent.every((p) => p.noReply)).toBe(true)
    } finally {
      await instance.hooks.dispose?.()
    }
  }, 30_000)

  test("two plugin instances for one directory in one process: the one running the monitor stops it", async () => {
    const root = tempDir()
    const env = { ...process.env, XDG_STATE_HOME: root }
    const api = new FakeSessionApi(Date.now)
    const config = { ...defaultMonitorConfig(), kill_grace_ms: 300 }
    const idle = createMonitorPlugin(config, { api, directory: root, env })
    const busy = createMonitorPlugin(config, { api, directory: root, env })
    try {
      const started = await startMonitor(busy.manager, {
        sessionID: "ses_1",
        directory: root,
        command: "sleep 30",
        label: "long",
      })
      writeStopRequest(projectStateDir(root, env), {
        serverPid: process.pid,
        sessionID: "ses_1",
        monitorId: started.id,
      })
      expect(await waitFor(() => busy.manager.get("ses_1", started.id)?.status.kind === "stopped", 10_000)).toBe(true)
      expect(busy.manager.get("ses_1", started.id)?.ending).toEqual({ reason: "stop", by: "person" })
    } finally {
      await idle.hooks.dispose?.()
      await busy.hooks.dispose?.()
    }
  }, 30_000)

  test("a request addressed to another server leaves this server's monitor running; the same polls take one addressed to it", async () => {
    const root = tempDir()
    const env = { ...process.env, XDG_STATE_HOME: root }
    const scheduler = new FakeScheduler()
    const api = new FakeSessionApi(() => scheduler.now())
    const instance = createMonitorPlugin(
      { ...defaultMonitorConfig(), kill_grace_ms: 300 },
      { api, directory: root, env, scheduler },
    )
    try {
      const started = await startMonitor(instance.manager, {
        sessionID: "ses_1",
        directory: root,
        command: "sleep 30",
        label: "long",
      })
      const dir = projectStateDir(root, env)
      const addressed = (serverPid: number) =>
        writeStopRequest(dir, { serverPid, sessionID: "ses_1", monitorId: started.id }, scheduler.now())
      const foreign = addressed(process.pid + 1)
      // Five polls on the fake clock, each pass let run to its end.
      await drive(scheduler, undefined, { until: () => false, stepMs: 1_000, maxSteps: 5 })
      expect(instance.manager.get("ses_1", started.id)?.ending).toBeUndefined()
      expect(existsSync(foreign)).toBe(true)
      // The control: the watcher was polling all along, and takes a request that is this server's.
      const own = addressed(process.pid)
      const ending = () => instance.manager.get("ses_1", started.id)?.ending
      await drive(scheduler, undefined, { until: () => ending() !== undefined, stepMs: 1_000, maxSteps: 10 })
      expect(ending()).toEqual({ reason: "stop", by: "person" })
      expect(existsSync(own)).toBe(false)
      expect(existsSync(foreign)).toBe(true)
    } finally {
      await drive(scheduler, instance.hooks.dispose?.())
    }
  }, 30_000)
})

describe("a stop-requests folder swapped for a symlink at any step of a pass", () => {
  const old = (Date.now() - 10 * STOP_REQUEST_STALE_MS) / 1000
  /**
   * The victim: a private folder elsewhere holding what a pass would remove in its own folder (an old
   * unparsable 0600 JSON file, an old temp file, another server's old request, this server's request
   * for a monitor it runs), under the very names the real folder lists.
   */
  const VICTIM: Record<string, string> = {
    "auth.json": '{"anthropic":{"type":"api","key":"sk-victim"}}',
    [requestName(7, 1)]: "{ not a request",
    [`${requestName(7, 2)}.0000000a.tmp`]: "{",
    [requestName(8, 3)]: requestBody(8, "mon_b", Date.now() - 10 * STOP_REQUEST_STALE_MS),
    [requestName(7, 4)]: requestBody(7, "mon_a"),
  }
  function stage(swapped: "stop-requests" | "project") {
    const root = tempDir()
    const project = join(root, "state")
    const folder = stopRequestDir(project)
    mkdirSync(folder, { recursive: true, mode: 0o700 })
    chmodSync(project, 0o700)
    const victimRoot = join(root, "victim")
    const victim = swapped === "stop-requests" ? victimRoot : stopRequestDir(victimRoot)
    mkdirSync(victim, { recursive: true, mode: 0o700 })
    chmodSync(victimRoot, 0o700)
    for (const [name, text] of Object.entries(VICTIM)) {
      writeFileSync(join(victim, name), text, { mode: 0o600 })
      utimesSync(join(victim, name), old, old)
      // The real folder lists the same names (fresh: nothing there is old enough to clean up) ...
      writeFileSync(join(folder, name), name === requestName(7, 4) ? text : "{}", { mode: 0o600 })
    }
    // ... and enough other entries that a pass takes more than one slice.
    for (let i = 0; i < 40; i++) writeFileSync(join(folder, `junk-${i}`), "", { mode: 0o600 })
    const victimFiles = () =>
      Object.fromEntries(readdirSync(victim).map((n) => [n, readFileSync(join(victim, n), "utf8")]))
    const swap = () => swapForSymlink(swapped === "stop-requests" ? folder : project, victimRoot)
    return { project, victimFiles, swap }
  }

  /** A pass whose every outside call (clock, ownership, a turn of the loop) may be the moment of the swap. */
  async function passSwappingAt(swapped: "stop-requests" | "project", step: number | undefined) {
    const staged = stage(swapped)
    let calls = 0
    const maybeSwap = () => {
      if (calls++ === step) staged.swap()
    }
    maybeSwap() // step 0: before the pass starts
    const seven = recorder(7, ["mon_a"], () => {
      maybeSwap()
      return Date.now()
    })
    await scanStopRequests(staged.project, {
      ...seven.handler,
      owns: (sessionID, monitorId) => {
        maybeSwap()
        return seven.handler.owns(sessionID, monitorId)
      },
      yieldToLoop: async () => {
        maybeSwap()
        await new Promise((resolve) => setImmediate(resolve))
      },
    })
    return { calls, victim: staged.victimFiles() }
  }

  for (const swapped of ["stop-requests", "project"] as const) {
    test(`the ${swapped} folder: nothing outside the plugin's folder is read for a request or deleted`, async () => {
      // A pass without a swap, to count its steps; then one pass per step, swapped right there.
      const { calls } = await passSwappingAt(swapped, undefined)
      expect(calls).toBeGreaterThanOrEqual(3)
      for (let step = 0; step < calls; step++) {
        const { victim } = await passSwappingAt(swapped, step)
        expect({ step, victim }).toEqual({ step, victim: VICTIM })
      }
    })
  }
})

describe("a stop-requests folder full of junk", () => {
  /** Well-formed requests addressed to this server, for monitors it does not run (dated now, or in an hour). */
  function junkFolder(count: number, requestedAt = Date.now() + 3_600_000) {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    mkdirSync(folder, { recursive: true, mode: 0o700 })
    for (let i = 0; i < count; i++) {
      writeFileSync(join(folder, requestName(7, i + 100)), requestBody(7, `mon_${i}`, requestedAt), { mode: 0o600 })
    }
    return { dir, folder }
  }

  test(
    "among as many junk requests as the folder bound allows, the real one is taken; at most 32 are read per turn of the event loop",
    async () => {
      const { dir, folder } = junkFolder(900, Date.now())
      writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_real" })
      const seven = recorder(7, ["mon_real"], () => Date.now())
      // Each fresh request read is asked about once (owns); a turn of the loop ends a stretch.
      const reads = stretchCounter()
      const stopped = await scanStopRequests(dir, {
        ...seven.handler,
        owns: (sessionID, monitorId) => {
          reads.step()
          return seven.handler.owns(sessionID, monitorId)
        },
        yieldToLoop: reads.yieldToLoop,
      })
      expect(stopped).toBe(1)
      expect(seven.calls).toEqual(["ses_1/mon_real"])
      expect(readdirSync(folder)).toHaveLength(900)
      expect(reads.all().reduce((a, b) => a + b, 0)).toBe(901)
      expect(Math.max(...reads.all())).toBeLessThanOrEqual(32)
    },
    FLOOD_TIMEOUT_MS,
  )

  test(
    "a folder over the bound is refused unread, in one line that says what to do; the TUI's request is refused too",
    async () => {
      const { dir, folder } = junkFolder(1_500)
      writeFileSync(join(folder, requestName(7, 1)), requestBody(7, "mon_real"), { mode: 0o600 })
      const errors: string[] = []
      const seven = { ...recorder(7, ["mon_real"], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
      const memory = newScanMemory()
      expect(await scanStopRequests(dir, seven, memory)).toBe(0)
      expect(await scanStopRequests(dir, seven, memory)).toBe(0)
      expect(errors).toHaveLength(1)
      expect(errors[0]).toContain(`${folder} (holds too many entries (a folder of `)
      expect(errors[0]).toContain("remove what is not opencode-monitor's")
      expect(() => writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_real" })).toThrow(
        "holds too many entries (a folder of ",
      )
    },
    FLOOD_TIMEOUT_MS,
  )

  test("a folder swapped back and forth is reported once per problem, not once a pass", async () => {
    const dir = tempDir()
    chmodSync(dir, 0o700)
    const folder = stopRequestDir(dir)
    mkdirSync(folder, { mode: 0o700 })
    writeFileSync(join(folder, "junk.json"), "{}", { mode: 0o600 })
    const target = tempDir()
    const errors: string[] = []
    const seven = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    const kept = newScanMemory()
    for (let i = 0; i < 10; i++) {
      await scanStopRequests(dir, seven, kept)
      if (i % 2 === 0) swapForSymlink(folder, target)
      else {
        rmSync(folder)
        renameSync(`${folder}.aside`, folder)
      }
    }
    expect(errors).toHaveLength(2)
  })

  test("what a pass skips is one log line, however many entries", async () => {
    const { dir, folder } = junkFolder(0)
    for (let i = 0; i < 300; i++) writeFileSync(join(folder, `junk-${i}.json`), "{}", { mode: 0o600 })
    for (let i = 0; i < 300; i++) writeFileSync(join(folder, requestName(7, i)), "{ not json", { mode: 0o600 })
    const errors: string[] = []
    const seven = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    const memory = newScanMemory()
    for (let i = 0; i < 3; i++) await scanStopRequests(dir, seven, memory)
    expect(errors).toHaveLength(1)
    expect(errors[0]).toContain("300 not named as a stop request")
    expect(errors[0]).toContain("300 not a stop request")
  })

  test("a burst of file events costs a bounded number of passes, and the request after it is still taken", async () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    mkdirSync(folder, { recursive: true, mode: 0o700 })
    // Enough entries that a pass takes two slices: the first pass is held at its turn of the loop.
    for (let i = 0; i < 40; i++) writeFileSync(join(folder, `junk-${i}`), "x")
    const scheduler = new FakeScheduler()
    let passes = 0
    let release: () => void = () => {}
    const held = new Promise<void>((resolve) => {
      release = resolve
    })
    const seven = recorder(7, ["mon_real"], () => {
      passes += 1
      return Date.now()
    })
    const stop = watchStopRequests(
      dir,
      {
        ...seven.handler,
        scheduler,
        yieldToLoop: async () => {
          if (passes === 1) await held
          await new Promise((resolve) => setImmediate(resolve))
        },
      },
      60_000,
    )
    try {
      await waitFor(() => passes === 1, 5_000)
      // While that pass runs, a burst: none starts another pass.
      for (let i = 0; i < 300; i++) writeFileSync(join(folder, `burst-${i}`), "x")
      await drive(scheduler, undefined, { until: () => false, stepMs: 200, maxSteps: 10 })
      expect(passes).toBe(1)
      release()
      writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_real" })
      await drive(scheduler, undefined, { until: () => seven.calls.length === 1, stepMs: 50, maxSteps: 100 })
      expect(seven.calls).toEqual(["ses_1/mon_real"])
      // The held one, one queued behind it, and one for the request: never one per event.
      expect(passes).toBeLessThanOrEqual(4)
    } finally {
      release()
      stop()
    }
  })
})

describe("where a folder cannot be addressed by descriptor (macOS)", () => {
  test("nothing is deleted: a taken request stays and is not taken twice; old junk and another server's old request stay", async () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_a" })
    const old = (Date.now() - 10 * STOP_REQUEST_STALE_MS) / 1000
    for (const [name, text] of [
      [requestName(7, 1), "{ not json"],
      [requestName(8, 2), requestBody(8, "mon_b")],
    ] as const) {
      writeFileSync(join(folder, name), text, { mode: 0o600 })
      utimesSync(join(folder, name), old, old)
    }
    const before = readdirSync(folder).sort()
    const seven = recorder(7, ["mon_a"], () => Date.now())
    const memory = newScanMemory()
    const handler = { ...seven.handler, descriptorPaths: false }
    expect(await scanStopRequests(dir, handler, memory)).toBe(1)
    expect(await scanStopRequests(dir, handler, memory)).toBe(0)
    expect(seven.calls).toEqual(["ses_1/mon_a"])
    expect(readdirSync(folder).sort()).toEqual(before)
  })
})
