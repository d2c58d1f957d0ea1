import { afterEach, describe, expect, test } from "bun:test"
import { spawnSync } from "node:child_process"
import {
  chmodSync,
  existsSync,
  lutimesSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
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
import { projectStateDir, stopRequestDir } from "../src/state/format"
import {
  parseStopRequest,
  STOP_REQUEST_STALE_MS,
  scanStopRequests,
  watchStopRequests,
  writeStopRequest,
} from "../src/state/stop-requests"
import { SkipLog } from "../src/state/safe-file"
import { FakeScheduler } from "./support/fake-scheduler"
import { drive } from "./support/drive"
import { startMonitor } from "./support/start"
import { FakeSessionApi } from "./support/fake-session-api"
import { liveProcesses, uniqueMarker, waitFor } from "./support/processes"

const roots: string[] = []
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true })
})

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "omo-stop-"))
  roots.push(dir)
  return dir
}

/** The skip log a watcher keeps across its scans. */
const skips = (handler: { onError?: (m: string) => void }) =>
  new SkipLog((message, extra) => handler.onError?.(`${message}: ${extra.path} (${extra.reason})`))

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

describe("stop requests between the TUI part and the server part", () => {
  test("a request is written atomically and read back whole", () => {
    const dir = tempDir()
    const path = writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_a" }, 123)
    expect(readdirSync(stopRequestDir(dir))).toEqual([path.slice(path.lastIndexOf("/") + 1)])
    expect(parseStopRequest(require("node:fs").readFileSync(path, "utf8"))).toEqual({
      format: "opencode-monitor/stop@1",
      serverPid: 7,
      sessionID: "ses_1",
      monitorId: "mon_a",
      requestedAt: 123,
    })
  })

  test("the addressed server takes its requests and removes them; another server's requests stay", () => {
    const dir = tempDir()
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_a" }, 1_000_000)
    writeStopRequest(dir, { serverPid: 8, sessionID: "ses_1", monitorId: "mon_b" }, 1_000_000)
    const seven = recorder(7, ["mon_a"])
    expect(scanStopRequests(dir, seven.handler)).toBe(1)
    expect(seven.calls).toEqual(["ses_1/mon_a"])
    expect(readdirSync(stopRequestDir(dir))).toHaveLength(1)
    const eight = recorder(8, ["mon_b"])
    expect(scanStopRequests(dir, eight.handler)).toBe(1)
    expect(readdirSync(stopRequestDir(dir))).toEqual([])
  })

  test("a request for a monitor this instance does not run is left for the instance that does", () => {
    const dir = tempDir()
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_b" }, 1_000_000)
    const first = recorder(7, ["mon_a"])
    expect(scanStopRequests(dir, first.handler)).toBe(0)
    expect(first.calls).toEqual([])
    expect(readdirSync(stopRequestDir(dir))).toHaveLength(1)
    const second = recorder(7, ["mon_b"])
    expect(scanStopRequests(dir, second.handler)).toBe(1)
    expect(second.calls).toEqual(["ses_1/mon_b"])
    expect(readdirSync(stopRequestDir(dir))).toEqual([])
  })

  test("a request nobody owns is ignored, and removed once stale", () => {
    const dir = tempDir()
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_gone" }, 1_000_000)
    expect(scanStopRequests(dir, recorder(7, []).handler)).toBe(0)
    expect(readdirSync(stopRequestDir(dir))).toHaveLength(1)
    expect(scanStopRequests(dir, recorder(7, [], () => 1_000_000 + STOP_REQUEST_STALE_MS + 1).handler)).toBe(0)
    expect(readdirSync(stopRequestDir(dir))).toEqual([])
  })

  test("unparsable requests are ignored, and removed only once old; stale ones of a vanished server go, a temp file in progress stays", () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    writeStopRequest(
      dir,
      { serverPid: 9, sessionID: "s", monitorId: "mon_old" },
      Date.now() - STOP_REQUEST_STALE_MS - 1,
    )
    writeStopRequest(dir, { serverPid: 9, sessionID: "s", monitorId: "mon_new" }, Date.now())
    for (const [name, text] of [
      ["stop-7-bad.json", "{ not json"],
      ["stop-7-other.json", JSON.stringify({ format: "something/else", serverPid: 7 })],
      ["stop-9-x.json.tmp", "{"],
    ] as const)
      writeFileSync(join(folder, name), text, { mode: 0o600 })
    const errors: string[] = []
    const seven = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    expect(() => scanStopRequests(dir, seven)).not.toThrow()
    const left = readdirSync(folder).sort()
    expect(left).toHaveLength(4)
    expect(left).toContain("stop-7-bad.json")
    expect(left).toContain("stop-7-other.json")
    expect(errors.filter((e) => e.includes("not a stop request"))).toHaveLength(2)
    // Long after: the plugin's own folder, old unparsable regular files of the user's, and the abandoned temp file go.
    const old = (Date.now() - STOP_REQUEST_STALE_MS * 2) / 1000
    for (const name of ["stop-7-bad.json", "stop-7-other.json", "stop-9-x.json.tmp"])
      utimesSync(join(folder, name), old, old)
    scanStopRequests(dir, recorder(7, [], () => Date.now()).handler)
    expect(readdirSync(folder)).toHaveLength(1)
  })

  test("a symlinked stop-requests folder is never followed: nothing in its target is read or deleted (repro T3)", () => {
    const dir = tempDir()
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const target = tempDir()
    for (const name of ["package.json", "tsconfig.json", "data.json"])
      writeFileSync(join(target, name), "{}", { mode: 0o600 })
    const old = (Date.now() - STOP_REQUEST_STALE_MS * 2) / 1000
    for (const name of ["package.json", "tsconfig.json", "data.json"]) utimesSync(join(target, name), old, old)
    symlinkSync(target, stopRequestDir(dir))
    const errors: string[] = []
    const handler = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    const log = skips(handler)
    for (let i = 0; i < 3; i++) scanStopRequests(dir, handler, log)
    expect(readdirSync(target).sort()).toEqual(["data.json", "package.json", "tsconfig.json"])
    expect(errors).toHaveLength(1)
    expect(errors[0]).toContain("is a symbolic link, not a folder")
  })

  test("a request someone else could write is refused: a 0644 file, a 0755 folder, a FIFO, a symlink, a huge file (repro T2)", () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    const body = (monitorId: string) =>
      JSON.stringify({
        format: "opencode-monitor/stop@1",
        serverPid: 7,
        sessionID: "ses_1",
        monitorId,
        requestedAt: Date.now(),
      })
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_real" })
    expect((statSync(folder).mode & 0o777).toString(8)).toBe("700")
    writeFileSync(join(folder, "stop-wide.json"), body("mon_wide"), { mode: 0o644 })
    spawnSync("mkfifo", [join(folder, "stop-fifo.json")])
    writeFileSync(join(dir, "elsewhere.json"), body("mon_link"), { mode: 0o600 })
    symlinkSync(join(dir, "elsewhere.json"), join(folder, "stop-link.json"))
    // A valid request of the future, 64 KB of padding: never read, whatever its date.
    writeFileSync(join(folder, "stop-huge.json"), `${body("mon_huge")}${" ".repeat(64 * 1024)}`, { mode: 0o600 })
    const all = ["mon_real", "mon_wide", "mon_fifo", "mon_link", "mon_huge"]
    const seven = recorder(7, all, () => Date.now())
    // A FIFO with no writer would block a plain read forever: the test would time out.
    expect(scanStopRequests(dir, seven.handler)).toBe(1)
    expect(seven.calls).toEqual(["ses_1/mon_real"])
    expect(readdirSync(folder).sort()).toEqual(["stop-fifo.json", "stop-huge.json", "stop-link.json", "stop-wide.json"])
    expect(existsSync(join(dir, "elsewhere.json"))).toBe(true)
    // The folder itself open to others: nothing in it is taken.
    writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_real" })
    chmodSync(folder, 0o755)
    expect(scanStopRequests(dir, recorder(7, all, () => Date.now()).handler)).toBe(0)
  })

  test("stale cleanup deletes only old regular 0600 files of the user's: an old FIFO, symlink, folder or 0644/0666 file stays", () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    writeStopRequest(dir, { serverPid: 9, sessionID: "s", monitorId: "mon_other" })
    // Unparsable: each would be removed once old, were it a regular 0600 file of the user's.
    writeFileSync(join(folder, "stop-bad.json"), "{ not json", { mode: 0o600 })
    for (const [name, mode] of [
      ["stop-0644.json", 0o644],
      ["stop-0666.json", 0o666],
    ] as const) {
      writeFileSync(join(folder, name), "{ not json", { mode })
      chmodSync(join(folder, name), mode)
    }
    expect(spawnSync("mkfifo", [join(folder, "stop-fifo.json")]).status).toBe(0)
    expect(spawnSync("mkfifo", [join(folder, "stop-fifo.json.tmp")]).status).toBe(0)
    writeFileSync(join(dir, "elsewhere.json"), "{ not json", { mode: 0o600 })
    symlinkSync(join(dir, "elsewhere.json"), join(folder, "stop-link.json"))
    symlinkSync(join(dir, "elsewhere.json"), join(folder, "stop-link.json.tmp"))
    mkdirSync(join(folder, "stop-dir.json"))
    const old = (Date.now() - STOP_REQUEST_STALE_MS * 2) / 1000
    for (const name of readdirSync(folder)) lutimesSync(join(folder, name), old, old)
    utimesSync(join(dir, "elsewhere.json"), old, old)
    const errors: string[] = []
    const seven = { ...recorder(7, [], () => Date.now()).handler, onError: (m: string) => errors.push(m) }
    expect(scanStopRequests(dir, seven)).toBe(0)
    // The old request of a vanished server and the old unparsable 0600 file go; nothing else.
    expect(readdirSync(folder).sort()).toEqual([
      "stop-0644.json",
      "stop-0666.json",
      "stop-dir.json",
      "stop-fifo.json",
      "stop-fifo.json.tmp",
      "stop-link.json",
      "stop-link.json.tmp",
    ])
    expect(existsSync(join(dir, "elsewhere.json"))).toBe(true)
    expect(errors.filter((e) => e.startsWith("skipping an untrusted entry"))).toHaveLength(5)
  })

  test("a request over the 4 KiB bound is refused and left; one of exactly 4 KiB is taken", () => {
    const dir = tempDir()
    const folder = stopRequestDir(dir)
    mkdirSync(folder, { mode: 0o700 })
    const padded = (monitorId: string, bytes: number) => {
      const body = JSON.stringify({
        format: "opencode-monitor/stop@1",
        serverPid: 7,
        sessionID: "ses_1",
        monitorId,
        requestedAt: Date.now(),
      })
      writeFileSync(join(folder, `stop-${monitorId}.json`), body + " ".repeat(bytes - body.length), { mode: 0o600 })
    }
    padded("mon_over", 4_097)
    const errors: string[] = []
    const over = recorder(7, ["mon_over"], () => Date.now())
    expect(scanStopRequests(dir, { ...over.handler, onError: (m: string) => errors.push(m) })).toBe(0)
    expect(over.calls).toEqual([])
    expect(readdirSync(folder)).toEqual(["stop-mon_over.json"])
    expect(errors).toEqual([
      `skipping an untrusted entry in the monitor state folder: ${join(folder, "stop-mon_over.json")} (too large (4097 bytes, bound 4096))`,
    ])
    padded("mon_at", 4_096)
    const at = recorder(7, ["mon_at"], () => Date.now())
    expect(scanStopRequests(dir, at.handler)).toBe(1)
    expect(at.calls).toEqual(["ses_1/mon_at"])
  })

  test("no folder: nothing to do, nothing created", () => {
    const dir = join(tempDir(), "absent")
    expect(scanStopRequests(dir, recorder(7).handler)).toBe(0)
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
      writeStopRequest(dir, { serverPid: 7, sessionID: "ses_1", monitorId: "mon_a" })
      scheduler.advance(100)
      expect(seven.calls).toEqual(["ses_1/mon_a"])
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
      // Five polls on the fake clock, run synchronously: nothing else (no fs.watch event) runs meanwhile.
      scheduler.advance(5_000)
      expect(instance.manager.get("ses_1", started.id)?.ending).toBeUndefined()
      expect(existsSync(foreign)).toBe(true)
      // The control: the watcher was polling all along, and takes a request that is this server's.
      const own = addressed(process.pid)
      scheduler.advance(1_000)
      expect(instance.manager.get("ses_1", started.id)?.ending).toEqual({ reason: "stop", by: "person" })
      expect(existsSync(own)).toBe(false)
      expect(existsSync(foreign)).toBe(true)
    } finally {
      await drive(scheduler, instance.hooks.dispose?.())
    }
  }, 30_000)
})
