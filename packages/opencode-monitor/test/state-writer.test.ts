import { afterEach, describe, expect, test } from "bun:test"
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { MonitorStatus } from "../src/codec"
import { defaultMonitorConfig } from "../src/config"
import type { MonitorInfo } from "../src/manager"
import { createMonitorPlugin } from "../src/plugin"
import { readProcess } from "../src/process/process-table"
import {
  parseStateFile,
  projectStateDir,
  STATE_LAST_LINES,
  STATE_LINE_TEXT_MAX,
  STATE_MAX_MONITORS,
  type StateLine,
  stateEntry,
} from "../src/state/format"
import {
  MonitorStateWriter,
  STATE_ENDED_RETAIN_MS,
  STATE_POLL_MS,
  STATE_WRITE_MIN_INTERVAL_MS,
} from "../src/state/writer"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi } from "./support/fake-session-api"
import { waitFor } from "./support/processes"
import { startMonitor } from "./support/start"
import { swapForSymlink } from "./support/swap"

const roots: string[] = []
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true })
})

function info(id: string, overrides: Partial<MonitorInfo> = {}): MonitorInfo {
  return {
    id,
    sessionID: "ses_1",
    label: `label-${id}`,
    cwd: "/work/project",
    pattern: undefined,
    wakePattern: undefined,
    wakeLimit: 0,
    startedAt: 0,
    endedAt: undefined,
    timeoutMs: 1_000,
    status: { kind: "running" },
    ending: undefined,
    counters: {
      total: 0,
      matched: 0,
      unmatched: 0,
      droppedMatched: 0,
      droppedUnmatched: 0,
      bytesDropped: 0,
      lastSeq: 0,
    },
    ...overrides,
  }
}

/** A monitor as the test edits it in place; `entries` turns it into its record entry as the manager does. */
type Snapshot = { info: MonitorInfo; pid: number; pidStartTime?: string; lastLines: StateLine[] }
const entries = (monitors: Snapshot[]) =>
  monitors.map((m) => stateEntry(m.info, { pid: m.pid, startTime: m.pidStartTime ?? `start-of-${m.pid}` }, m.lastLines))

/** A writer over a fake clock and a list of monitors the test edits in place. */
function setup() {
  const root = mkdtempSync(join(tmpdir(), "omo-state-"))
  roots.push(root)
  const env = { XDG_STATE_HOME: root }
  const scheduler = new FakeScheduler()
  const monitors: Snapshot[] = []
  const logs: string[] = []
  let writes = 0
  const writer = new MonitorStateWriter({
    directory: "/work/project",
    // Each leader as it started, as the manager's snapshot tells it.
    source: () => entries(monitors),
    scheduler,
    log: { warn: (message) => logs.push(message) },
    env,
    server: { pid: 4242, pidStartTime: "777" },
    instance: "i1",
  })
  const dir = projectStateDir("/work/project", env)
  const read = () => {
    if (!existsSync(writer.path)) return undefined
    const parsed = parseStateFile(readFileSync(writer.path, "utf8"))
    if (!parsed.ok) throw new Error(parsed.error)
    return parsed.file
  }
  // Counts the file versions the test saw change (each write replaces the file by rename).
  let lastText = ""
  const countWrite = () => {
    const text = existsSync(writer.path) ? readFileSync(writer.path, "utf8") : ""
    if (text !== lastText) writes++
    lastText = text
    return writes
  }
  return { writer, scheduler, monitors, logs, dir, read, countWrite, env }
}

const line = (seq: number, text: string) => ({ stream: "stdout" as const, seq, text })

describe("MonitorStateWriter", () => {
  test("0700 folder, 0600 file, and a symlink planted at the temp name or the file's name is never written through", () => {
    const { writer, scheduler, monitors, read, dir } = setup()
    mkdirSync(dir, { recursive: true, mode: 0o755 })
    chmodSync(dir, 0o755)
    const victim = join(roots[0] as string, "victim.txt")
    writeFileSync(victim, "keep me")
    // The name a writer with a fixed temp name would open, and the record's own name.
    symlinkSync(victim, `${writer.path}.tmp`)
    monitors.push({ info: info("mon_a"), pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    expect(read()?.monitors.map((m) => m.id)).toEqual(["mon_a"])
    expect(readFileSync(victim, "utf8")).toBe("keep me")
    expect((statSync(dir).mode & 0o777).toString(8)).toBe("700")
    expect((statSync(writer.path).mode & 0o777).toString(8)).toBe("600")
    rmSync(writer.path)
    symlinkSync(victim, writer.path)
    monitors.push({ info: info("mon_b"), pid: 101, lastLines: [] })
    writer.changed()
    scheduler.advance(STATE_WRITE_MIN_INTERVAL_MS)
    expect(readFileSync(victim, "utf8")).toBe("keep me")
    expect(lstatSync(writer.path).isFile()).toBe(true)
  })

  test("the record is removed only in its own folder: swapped for a symlink, a same-named file where it points stays", () => {
    const { writer, scheduler, monitors, read, dir } = setup()
    monitors.push({ info: info("mon_a"), pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    expect(read()?.monitors.map((m) => m.id)).toEqual(["mon_a"])
    const victim = join(roots[0] as string, "victim")
    mkdirSync(victim, { mode: 0o700 })
    writeFileSync(join(victim, "server-4242-777-i1.json"), "keep me")
    swapForSymlink(dir, victim)
    writer.dispose()
    expect(readFileSync(join(victim, "server-4242-777-i1.json"), "utf8")).toBe("keep me")
  })

  test("a start is on disk at once, in this server's own file under the project's state folder", () => {
    const { writer, scheduler, monitors, read, dir } = setup()
    monitors.push({ info: info("mon_a"), pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    expect(writer.path).toBe(join(dir, "server-4242-777-i1.json"))
    const file = read()
    expect(file?.server).toEqual({ pid: 4242, pidStartTime: "777", directory: "/work/project", updatedAt: 0 })
    expect(file?.monitors).toEqual([
      {
        id: "mon_a",
        sessionID: "ses_1",
        label: "label-mon_a",
        startedAt: 0,
        endedAt: undefined,
        status: { kind: "running" },
        ending: undefined,
        pid: 100,
        pidStartTime: "start-of-100",
        linesSeen: 0,
        lastLines: [],
        deadlineAt: 1_000,
      },
    ])
    // Atomic: only the final file is left, never a temp file.
    expect(readdirSync(dir)).toEqual(["server-4242-777-i1.json"])
  })

  test("two plugin instances of one server process write two files, never each other's", () => {
    const first = setup()
    const second = new MonitorStateWriter({
      directory: "/work/project",
      source: () => entries([{ info: info("mon_other"), pid: 101, lastLines: [] }]),
      scheduler: first.scheduler,
      log: { warn: () => {} },
      env: first.env,
      server: { pid: 4242, pidStartTime: "777" },
    })
    first.monitors.push({ info: info("mon_a"), pid: 100, lastLines: [] })
    first.writer.changed()
    second.changed()
    first.scheduler.advance(0)
    expect(second.path).not.toBe(first.writer.path)
    expect(first.read()?.monitors.map((m) => m.id)).toEqual(["mon_a"])
    const other = parseStateFile(readFileSync(second.path, "utf8"))
    expect(other.ok && other.file.monitors.map((m) => m.id)).toEqual(["mon_other"])
    second.dispose()
    expect(first.read()?.monitors.map((m) => m.id)).toEqual(["mon_a"])
  })

  test("new output reaches the file within STATE_POLL_MS, and a flood writes at most 4 times a second", () => {
    const { writer, scheduler, monitors, read, countWrite } = setup()
    const monitor = info("mon_a")
    monitors.push({ info: monitor, pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    countWrite()
    // Output arrives every 10 ms for 10 s, and every line triggers a change notice as well.
    let seq = 0
    let maxLag = 0
    let changedAt = -1
    for (let t = 0; t < 10_000; t += 10) {
      seq++
      monitor.counters.total = seq
      monitor.counters.lastSeq = seq
      ;(monitors[0] as { lastLines: StateLine[] }).lastLines = [line(seq, `line ${seq}`)]
      if (changedAt < 0) changedAt = scheduler.now()
      writer.changed()
      scheduler.advance(10)
      countWrite()
      if (read()?.monitors[0]?.linesSeen === seq) {
        maxLag = Math.max(maxLag, scheduler.now() - changedAt)
        changedAt = -1
      }
    }
    const writes = countWrite()
    expect(writes).toBeLessThanOrEqual(1 + (10_000 / 1_000) * (1_000 / STATE_WRITE_MIN_INTERVAL_MS))
    // The documented number (docs/tui.md), whatever the constant says: four a second, 41 file versions in 10 s.
    expect(writes).toBeLessThanOrEqual(41)
    expect(writes).toBeGreaterThanOrEqual(10)
    expect(maxLag).toBeLessThanOrEqual(STATE_POLL_MS)
  })

  test("output alone, with no change notice, is picked up by the poll while a monitor runs", () => {
    const { writer, scheduler, monitors, read } = setup()
    const monitor = info("mon_a")
    monitors.push({ info: monitor, pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    monitor.counters.total = 3
    ;(monitors[0] as { lastLines: StateLine[] }).lastLines = [line(1, "a"), line(2, "b"), line(3, "c")]
    scheduler.advance(STATE_POLL_MS)
    expect(read()?.monitors[0]?.linesSeen).toBe(3)
    expect(read()?.monitors[0]?.lastLines.map((l) => l.text)).toEqual(["a", "b", "c"])
  })

  test("an exit is written with its status; the ended entry expires after STATE_ENDED_RETAIN_MS and the file goes", () => {
    const { writer, scheduler, monitors, read } = setup()
    const monitor = info("mon_a", { ending: undefined })
    monitors.push({ info: monitor, pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(1_000)
    monitor.status = { kind: "exited", code: 3 } satisfies MonitorStatus
    monitor.endedAt = scheduler.now()
    writer.changed()
    scheduler.advance(STATE_WRITE_MIN_INTERVAL_MS)
    expect(read()?.monitors.map((m) => [m.status, m.endedAt])).toEqual([[{ kind: "exited", code: 3 }, 1_000]])
    // The manager forgets it (session deleted); the record keeps it for the TUI a while.
    monitors.length = 0
    scheduler.advance(STATE_ENDED_RETAIN_MS - 2 * STATE_WRITE_MIN_INTERVAL_MS)
    expect(read()?.monitors).toHaveLength(1)
    scheduler.advance(STATE_ENDED_RETAIN_MS)
    expect(read()).toBeUndefined()
    expect(scheduler.pendingTimers).toBe(0)
  })

  test("an exit whose notice is still queued is marked wakePending, kept past the retention, and cleared once sent", () => {
    const { scheduler, monitors, env } = setup()
    const queued = new Set<string>()
    const writer = new MonitorStateWriter({
      directory: "/work/project",
      source: () => entries(monitors),
      scheduler,
      log: { warn: () => {} },
      env,
      server: { pid: 4243, pidStartTime: "777" },
      wakePending: ({ id }) => queued.has(id),
    })
    const monitor = info("mon_a")
    monitors.push({ info: monitor, pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    monitor.status = { kind: "exited", code: 2 }
    monitor.endedAt = scheduler.now()
    queued.add("mon_a") // the session is busy: the exit notice waits
    writer.changed()
    scheduler.advance(STATE_WRITE_MIN_INTERVAL_MS)
    const fileOf = () => {
      const parsed = parseStateFile(readFileSync(writer.path, "utf8"))
      return parsed.ok ? parsed.file.monitors : []
    }
    expect(fileOf().map((m) => [m.status.kind, m.wakePending])).toEqual([["exited", true]])
    scheduler.advance(2 * STATE_ENDED_RETAIN_MS)
    expect(fileOf().map((m) => m.wakePending)).toEqual([true])
    queued.delete("mon_a") // sent
    scheduler.advance(STATE_POLL_MS)
    expect(existsSync(writer.path)).toBe(false)
  })

  test("bounded: at most STATE_MAX_MONITORS entries (running first), STATE_LAST_LINES lines, each cut to STATE_LINE_TEXT_MAX", () => {
    const { writer, scheduler, monitors, read } = setup()
    const long = "x".repeat(10 * STATE_LINE_TEXT_MAX)
    for (let i = 0; i < STATE_MAX_MONITORS + 20; i++) {
      const ended = i < 40
      monitors.push({
        info: info(`mon_${i}`, ended ? { status: { kind: "exited", code: 0 }, endedAt: i } : { startedAt: i }),
        pid: 1000 + i,
        lastLines: Array.from({ length: 20 }, (_, n) => line(n + 1, long)),
      })
    }
    writer.changed()
    scheduler.advance(0)
    const file = read()
    expect(file?.monitors).toHaveLength(STATE_MAX_MONITORS)
    const running = file?.monitors.filter((m) => m.status.kind === "running") ?? []
    expect(running).toHaveLength(STATE_MAX_MONITORS + 20 - 40)
    // The newest ended ones fill the rest.
    expect(file?.monitors.at(-1)?.id).toBe(`mon_${40 - (STATE_MAX_MONITORS - running.length)}`)
    for (const m of file?.monitors ?? []) {
      expect(m.lastLines.map((l) => l.seq)).toEqual([16, 17, 18, 19, 20].slice(-STATE_LAST_LINES))
      // The "last 5 lines" of docs/delivery-and-waking.md, whatever the constant says.
      expect(m.lastLines.map((l) => l.seq)).toEqual([16, 17, 18, 19, 20])
      for (const l of m.lastLines) expect(l.text.length).toBe(STATE_LINE_TEXT_MAX)
    }
  })

  test("the record never holds the raw command or the match pattern", () => {
    const { writer, scheduler, monitors } = setup()
    monitors.push({ info: info("mon_a", { label: "build", pattern: "SECRET_PATTERN" }), pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    const text = readFileSync(writer.path, "utf8")
    expect(text).not.toContain("SECRET_PATTERN")
    expect(text).not.toContain("command")
  })

  test("dispose removes the file; later changes write nothing", () => {
    const { writer, scheduler, monitors, read } = setup()
    monitors.push({ info: info("mon_a"), pid: 100, lastLines: [] })
    writer.changed()
    scheduler.advance(0)
    expect(read()).toBeDefined()
    writer.dispose()
    expect(read()).toBeUndefined()
    writer.changed()
    scheduler.advance(10_000)
    expect(read()).toBeUndefined()
    expect(scheduler.pendingTimers).toBe(0)
  })

  test("a state folder that cannot be written is one log line, never a throw", () => {
    const root = mkdtempSync(join(tmpdir(), "omo-state-"))
    roots.push(root)
    const scheduler = new FakeScheduler()
    const logs: string[] = []
    const monitor = info("mon_a")
    // XDG_STATE_HOME is a file: every mkdir under it fails.
    const blocker = join(root, "file")
    writeFileSync(blocker, "")
    const writer = new MonitorStateWriter({
      directory: "/p",
      source: () => entries([{ info: monitor, pid: 1, lastLines: [] }]),
      scheduler,
      log: { warn: (message) => logs.push(message) },
      env: { XDG_STATE_HOME: blocker },
      server: { pid: 1, pidStartTime: "1" },
    })
    writer.changed()
    for (let i = 0; i < 10; i++) {
      monitor.counters.total++
      expect(() => scheduler.advance(STATE_POLL_MS)).not.toThrow()
    }
    expect(logs).toHaveLength(1)
    expect(logs[0]).toContain("could not write the monitor state file")
  })
})

describe("the plugin keeps the record of its real monitors", () => {
  test("a running command's leader pid, its start time and its last lines are on disk; dispose removes the file", async () => {
    const root = mkdtempSync(join(tmpdir(), "omo-state-"))
    roots.push(root)
    const env = { ...process.env, XDG_STATE_HOME: root }
    const api = new FakeSessionApi(Date.now)
    const instance = createMonitorPlugin(
      { ...defaultMonitorConfig(), kill_grace_ms: 300 },
      { api, directory: root, env },
    )
    const started = await startMonitor(instance.manager, {
      sessionID: "ses_1",
      directory: root,
      command: "echo one; echo two >&2; sleep 30",
      label: "writer-live",
    })
    const dir = projectStateDir(root, env)
    const entry = await waitForValue(() => {
      const name = existsSync(dir) ? readdirSync(dir).find((n) => n.startsWith(`server-${process.pid}-`)) : undefined
      if (!name) return undefined
      const parsed = parseStateFile(readFileSync(join(dir, name), "utf8"))
      const monitor = parsed.ok ? parsed.file.monitors[0] : undefined
      return monitor && monitor.linesSeen === 2 ? monitor : undefined
    }, 5_000)
    expect(entry.id).toBe(started.id)
    expect(entry.label).toBe("writer-live")
    expect(entry.pidStartTime).toBe((await readProcess(entry.pid))?.start as string)
    expect(entry.lastLines.map((l) => [l.stream, l.text]).sort()).toEqual([
      ["stderr", "two"],
      ["stdout", "one"],
    ])
    await instance.hooks.dispose?.()
    expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([])
  }, 15_000)
})

test("an exit while its session is busy is recorded as owed (wakePending) until the notice is sent", async () => {
  const root = mkdtempSync(join(tmpdir(), "omo-state-"))
  roots.push(root)
  const env = { ...process.env, XDG_STATE_HOME: root }
  const api = new FakeSessionApi(Date.now)
  api.busy.ses_1 = "busy"
  const instance = createMonitorPlugin(
    { ...defaultMonitorConfig(), pending_retry_ms: 100 },
    { api, directory: root, env },
  )
  const started = await startMonitor(instance.manager, {
    sessionID: "ses_1",
    directory: root,
    command: "echo done; exit 3",
  })
  const dir = projectStateDir(root, env)
  const entryOf = () => {
    const name = existsSync(dir) ? readdirSync(dir).find((n) => n.startsWith("server-")) : undefined
    const parsed = name ? parseStateFile(readFileSync(join(dir, name), "utf8")) : undefined
    return parsed?.ok ? parsed.file.monitors.find((m) => m.id === started.id) : undefined
  }
  const owed = await waitForValue(() => (entryOf()?.wakePending ? entryOf() : undefined), 5_000)
  expect(owed.status).toEqual({ kind: "exited", code: 3 })
  expect(owed.ending).toEqual({ reason: "exit" })
  delete api.busy.ses_1
  await waitForValue(() => (api.sent.length > 0 ? true : undefined), 5_000)
  const settled = await waitForValue(() => {
    const entry = entryOf()
    return entry && !entry.wakePending ? entry : undefined
  }, 5_000)
  expect(settled.status.kind).toBe("exited")
  await instance.hooks.dispose?.()
}, 15_000)

async function waitForValue<T>(get: () => T | undefined, timeoutMs: number): Promise<T> {
  let value: T | undefined
  const found = () => {
    value = get()
    return value !== undefined
  }
  if (!(await waitFor(found, timeoutMs))) throw new Error("timed out waiting for the state file")
  return value as T
}
