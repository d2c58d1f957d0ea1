// test-runner: about 5 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { spawnSync } from "node:child_process"
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type MonitorStatus, NOTE_KEY } from "../src/codec"
import { formatMonitorBatch } from "../src/delivery/envelope"
import { NO_DROPS } from "../src/pipeline/batcher"
import { readProcess } from "../src/process/process-table"
import { type MonitorStateEntry, STATE_FILE_MAX_BYTES, STATE_FORMAT, serverStateFileName } from "../src/state/format"
import { type MessagePart, monitorsFromMessages } from "../src/tui/from-messages"
import { readLocalState, withRemembered } from "../src/tui/local-state"
import type { MonitorView } from "../src/tui/view"
import { batchOf, sizedLine } from "./support/lines"
import { waitFor } from "./support/processes"
import { stateEntry } from "./support/state-entry"
import { stretchCounter } from "./support/stretches"
import { BACK_ENDS } from "./support/tables"

/** Writing thousands of files takes seconds on a loaded 2-core machine. */
const FLOOD_TIMEOUT_MS = 60_000

const roots: string[] = []
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true })
})

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "omo-tui-"))
  roots.push(dir)
  return dir
}

const entry = stateEntry

function writeServerFile(dir: string, pid: number, monitors: MonitorStateEntry[], updatedAt = 5_000): void {
  const file = { format: STATE_FORMAT, server: { pid, pidStartTime: "1", directory: "/p", updatedAt }, monitors }
  writeFileSync(join(dir, serverStateFileName(pid, "1")), JSON.stringify(file))
}

const alive = (pids: number[]) => ({ isServerAlive: (pid: number) => pids.includes(pid) })

describe("reading the local state files", () => {
  test("a missing folder is nothing, without a note", async () => {
    expect(await readLocalState(join(tempDir(), "absent"))).toEqual({ monitors: [], notes: [], liveServers: [] })
  })

  test("a live server's monitors, with the pid a stop request goes to", async () => {
    const dir = tempDir()
    writeServerFile(dir, 11, [entry("mon_a")])
    const snap = await readLocalState(dir, alive([11]))
    expect(snap.liveServers).toEqual([11])
    expect(snap.monitors.map((m) => [m.id, m.status.kind, m.serverPid])).toEqual([["mon_a", "running", 11]])
  })

  test("corrupt, partial, foreign and old-format files give a short note, never an exception", async () => {
    const dir = tempDir()
    writeServerFile(dir, 11, [entry("mon_a")])
    writeFileSync(join(dir, "server-12-1.json"), "{ half a file")
    writeFileSync(join(dir, "server-13-1.json"), JSON.stringify({ format: "opencode-monitor/state@0", monitors: [] }))
    writeFileSync(join(dir, "server-14-1.json"), JSON.stringify({ format: STATE_FORMAT, server: "nope", monitors: [] }))
    writeFileSync(join(dir, "server-15-1.json"), "\u0000\u0001binary")
    writeFileSync(join(dir, "server-16-1.json.tmp"), "{}")
    writeFileSync(join(dir, "notes.txt"), "ignored")
    const snap = await readLocalState(dir, alive([11]))
    expect(snap.monitors.map((m) => m.id)).toEqual(["mon_a"])
    expect(snap.notes).toEqual([
      "3 unreadable monitor state files skipped",
      "1 state file from another opencode-monitor version skipped: update both parts to the same version",
    ])
  })

  test("a FIFO, a symlink, a file others may write and an oversized file are skipped untrusted, never followed or blocked on", async () => {
    const dir = tempDir()
    writeServerFile(dir, 11, [entry("mon_a")])
    const elsewhere = join(tempDir(), "real.json")
    writeFileSync(
      elsewhere,
      JSON.stringify({
        format: STATE_FORMAT,
        server: { pid: 12, pidStartTime: "1", directory: "/p", updatedAt: 1 },
        monitors: [entry("mon_link")],
      }),
    )
    symlinkSync(elsewhere, join(dir, "server-12-1.json"))
    // No writer: a blocking read would never return.
    expect(spawnSync("mkfifo", [join(dir, "server-13-1.json")]).status).toBe(0)
    writeServerFile(dir, 14, [entry("mon_wide")])
    chmodSync(join(dir, serverStateFileName(14, "1")), 0o666)
    writeFileSync(join(dir, "server-15-1.json"), " ".repeat(STATE_FILE_MAX_BYTES + 1))
    const snap = await readLocalState(dir, alive([11, 12, 14]))
    expect(snap.monitors.map((m) => m.id)).toEqual(["mon_a"])
    expect(snap.notes).toEqual([
      "4 untrusted files in the monitor state folder skipped (a symlink, FIFO or device, someone else's, writable by others, or too large)",
    ])
  })

  test("a state folder that is a symlink is not read", async () => {
    const real = tempDir()
    writeServerFile(real, 11, [entry("mon_a")])
    const link = join(tempDir(), "link")
    symlinkSync(real, link)
    const snap = await readLocalState(link, alive([11]))
    expect(snap.monitors).toEqual([])
    expect(snap.notes).toEqual([`monitor state folder not read: ${link}: is a symbolic link, not a folder`])
  })

  test("a file that vanishes between listing and reading is skipped; a throwing liveness check counts as dead", async () => {
    const dir = tempDir()
    writeServerFile(dir, 11, [entry("mon_a")])
    writeServerFile(dir, 99, [entry("mon_gone")])
    // The record of server 99 goes while the pass waits for its turn to read it.
    const snap = await readLocalState(dir, {
      yieldToLoop: async () => rmSync(join(dir, serverStateFileName(99, "1")), { force: true }),
      isServerAlive: () => {
        throw new Error("boom")
      },
    })
    expect(snap.monitors.map((m) => [m.id, m.status.kind])).toEqual([["mon_a", "lost"]])
  })

  test("a dead server's running monitor is shown lost, never running, and cannot be stopped", async () => {
    const dir = tempDir()
    writeServerFile(dir, 11, [entry("mon_a"), entry("mon_b", { status: { kind: "exited", code: 0 }, endedAt: 2_000 })])
    const snap = await readLocalState(dir, alive([]))
    expect(snap.liveServers).toEqual([])
    expect(snap.monitors.map((m) => [m.id, m.status.kind, m.serverPid])).toEqual([
      ["mon_a", "lost", undefined],
      ["mon_b", "exited", undefined],
    ])
  })

  test("the same monitor in two files: the newest record wins", async () => {
    const dir = tempDir()
    writeServerFile(dir, 11, [entry("mon_a", { linesSeen: 1 })], 5_000)
    writeServerFile(dir, 12, [entry("mon_a", { linesSeen: 9 })], 9_000)
    expect((await readLocalState(dir, alive([11, 12]))).monitors.map((m) => [m.linesSeen, m.serverPid])).toEqual([
      [9, 12],
    ])
  })

  test.each(BACK_ENDS)(
    "this process is alive by pid; a pid whose start time differs is not the same process (%s)",
    async (_name, table) => {
      const { isServerAlive } = await import("../src/tui/local-state")
      // With ps the answer is the last background read's (each refresh asks again): asked until it
      // comes. A server not read yet counts as alive, so an answer "alive" must hold for a while.
      const becomes = (pid: number, start: string | undefined, alive: boolean, ms: number) =>
        waitFor(() => isServerAlive(pid, start, table) === alive, ms)
      expect(await becomes(process.pid, "not-its-start-time", false, 3_000)).toBe(true)
      expect(await becomes(2 ** 22 + 7, undefined, false, 3_000)).toBe(true)
      const start = (await readProcess(process.pid, table))?.start
      expect(await becomes(process.pid, start, false, 500)).toBe(false)
      expect(await becomes(process.pid, undefined, false, 500)).toBe(false)
      if (table.cheap) expect(isServerAlive(2 ** 22 + 9, undefined, table)).toBe(false)
    },
  )
})

describe("a state folder flooded with records", () => {
  function flooded(count: number, bytes = 0) {
    const dir = tempDir()
    chmodSync(dir, 0o700)
    const pad = "x".repeat(bytes)
    for (let i = 0; i < count; i++) {
      const file = {
        format: STATE_FORMAT,
        server: { pid: 100_000 + i, pidStartTime: "1", directory: "/p", updatedAt: 5_000 },
        monitors: [entry(`mon_${i}`)],
        pad,
      }
      writeFileSync(join(dir, serverStateFileName(100_000 + i, "1")), JSON.stringify(file))
    }
    return dir
  }

  test("at most 32 records are read per refresh; a note counts the rest", async () => {
    const snap = await readLocalState(flooded(40), alive([]))
    // STATE_RECORDS_MAX
    expect(snap.monitors).toHaveLength(32)
    expect(snap.notes).toEqual([
      "8 more monitor state files not read: at most 32 are; remove the ones of servers that no longer run",
    ])
  })

  test.each([
    ["1 000 records", 1_000, 0],
    ["records of 1 MiB each", 32, STATE_FILE_MAX_BYTES - 4_096],
  ])(
    "%s: a refresh reads one record per turn of the event loop, at most 32",
    async (_, count, bytes) => {
      const dir = flooded(count, bytes)
      // Each record read is one liveness check of its server; a turn of the loop ends a stretch.
      const reads = stretchCounter()
      const snap = await readLocalState(dir, {
        isServerAlive: () => {
          reads.step()
          return false
        },
        yieldToLoop: reads.yieldToLoop,
      })
      expect(snap.monitors).toHaveLength(32)
      expect(Math.max(...reads.all())).toBe(1)
    },
    FLOOD_TIMEOUT_MS,
  )

  test(
    "a folder over the size bound is not listed: a note says what to do",
    async () => {
      const dir = flooded(3_000)
      const snap = await readLocalState(dir, alive([]))
      expect(snap.monitors).toEqual([])
      expect(snap.notes).toHaveLength(1)
      expect(snap.notes[0]).toContain(`monitor state folder not read: ${dir}: holds too many entries`)
    },
    FLOOD_TIMEOUT_MS,
  )

  test("a record reused from the last refresh is read again once its file changes", async () => {
    const dir = tempDir()
    const cache = new Map()
    writeServerFile(dir, 11, [entry("mon_a", { linesSeen: 1 })])
    expect((await readLocalState(dir, { ...alive([11]), cache })).monitors.map((m) => m.linesSeen)).toEqual([1])
    expect((await readLocalState(dir, { ...alive([11]), cache })).monitors.map((m) => m.linesSeen)).toEqual([1])
    writeServerFile(dir, 11, [entry("mon_a", { linesSeen: 22 })])
    expect((await readLocalState(dir, { ...alive([11]), cache })).monitors.map((m) => m.linesSeen)).toEqual([22])
  })
})

describe("remembering ended monitors the state file dropped", () => {
  const view = (id: string, kind: "exited" | "running"): MonitorView => ({
    ...entry(id),
    status: kind === "exited" ? { kind, code: 0 } : { kind },
    serverPid: 1,
  })

  test("an ended monitor stays countable after its record is gone; a running one is not invented", () => {
    const memory = new Map<string, MonitorView>()
    withRemembered(memory, [view("a", "exited"), view("b", "running")])
    const later = withRemembered(memory, [])
    expect(later.map((m) => [m.id, m.serverPid])).toEqual([["a", undefined]])
  })

  test("the memory is bounded, newest kept", () => {
    const memory = new Map<string, MonitorView>()
    for (let i = 0; i < 10; i++) withRemembered(memory, [view(`m${i}`, "exited")], 3)
    expect([...memory.keys()]).toEqual(["m7", "m8", "m9"])
  })
})

describe("the remote fallback: what the session's messages show", () => {
  const started: MessagePart = {
    type: "tool",
    tool: "monitor_start",
    at: 1_000,
    state: {
      status: "completed",
      output: "Started monitor mon_1a2b3c4d (label: qa-build).\nIts output will arrive…",
      metadata: { monitorId: "mon_1a2b3c4d", label: "qa-build" },
      time: { start: 900 },
    },
  }
  /** An envelope as the server part sends it: its text, and its note as the text part's metadata. */
  const envelope = (batch: number, lines: string[], status: MonitorStatus, at: number): MessagePart => {
    const sent = lines.map((line, i) => sizedLine(batch * 10 + i, i % 2 ? "stderr" : "stdout", line))
    const out = batchOf({
      monitorId: "mon_1a2b3c4d",
      batchSeq: batch,
      lines: sent,
      stillRunning: status.kind === "running",
      status,
      dropped: NO_DROPS,
    })
    const key = `monitor-output:mon_1a2b3c4d:batch-${batch}`
    return {
      type: "text",
      at,
      text: formatMonitorBatch({ batch: out, label: "qa-build" }),
      metadata: {
        [NOTE_KEY]: {
          key,
          monitorId: "mon_1a2b3c4d",
          batch,
          label: "qa-build",
          status,
          wake: status.kind !== "running",
        },
      },
    }
  }

  test("monitor_start results and delivered envelopes give label, status, lines seen and last lines", () => {
    const parts = [
      started,
      envelope(1, ["one", "two"], { kind: "running" }, 2_000),
      envelope(2, ["three"], { kind: "exited", code: 3 }, 3_000),
    ]
    const [view, ...rest] = monitorsFromMessages("ses_1", parts, 10_000)
    expect(rest).toEqual([])
    expect(view).toMatchObject({
      id: "mon_1a2b3c4d",
      label: "qa-build",
      startedAt: 900,
      endedAt: 3_000,
      status: { kind: "exited", code: 3 },
      linesSeen: 20,
      serverPid: undefined,
    })
    expect(view?.lastLines.map((l) => `${l.stream}:${l.seq}:${l.text}`)).toEqual([
      "stdout:10:one",
      "stderr:11:two",
      "stdout:20:three",
    ])
  })

  test("a started monitor with no envelope yet is running; a person quoting an envelope is not one", () => {
    const quoted: MessagePart = { type: "text", text: `look: ${envelope(1, [], { kind: "exited", code: 0 }, 0).text}` }
    const views = monitorsFromMessages(
      "ses_1",
      [started, quoted, { type: "text" }, { type: "reasoning", text: "x" }],
      10_000,
    )
    expect(views.map((v) => [v.id, v.status.kind])).toEqual([["mon_1a2b3c4d", "running"]])
  })

  test("a stop by the person and a timeout are named", () => {
    const byPerson: MonitorStatus = { kind: "stopped", signal: "SIGTERM", byPerson: true }
    const stopped = monitorsFromMessages("s", [envelope(1, [], byPerson, 5)], 9)
    expect(stopped[0]?.status).toEqual(byPerson)
    const timedOut = monitorsFromMessages(
      "s",
      [envelope(1, [], { kind: "timed_out", afterMs: 5, signal: "SIGTERM" }, 5)],
      9,
    )
    expect(timedOut[0]?.status.kind).toBe("timed_out")
  })

  test("a lost monitor is shown lost, not failed", () => {
    const plain = monitorsFromMessages("s", [envelope(1, [], { kind: "lost", survivorPid: undefined }, 5)], 9)
    expect(plain[0]?.status.kind).toBe("lost")
    const survivor = monitorsFromMessages("s", [envelope(1, [], { kind: "lost", survivorPid: 4242 }, 5)], 9)
    expect(survivor[0]?.status).toEqual({ kind: "lost", survivorPid: 4242 })
    expect(survivor[0]?.endedAt).toBe(5)
  })

  test("only the note says what an envelope is: text that looks like one, without it, is not", () => {
    const forged: MessagePart = { ...envelope(1, [], { kind: "exited", code: 0 }, 5), metadata: undefined }
    expect(monitorsFromMessages("s", [forged], 9)).toEqual([])
  })

  test("a session without monitors gives nothing", () => {
    expect(monitorsFromMessages("s", [{ type: "text", text: "hello" }], 0)).toEqual([])
  })
})

describe("folders", () => {
  test("reading never creates anything", async () => {
    const dir = join(tempDir(), "project")
    await readLocalState(dir)
    expect(existsSync(dir)).toBe(false)
    mkdirSync(dir)
    await readLocalState(dir)
    expect(readdirSync(dir)).toEqual([])
  })
})
