import { attempt } from "../errors"
import { mayStillRun, type ProcessTable, processTable, runsAs } from "../process/process-table"
import {
  type ParseResult,
  parseStateFile,
  STATE_FILE_MAX_BYTES,
  STATE_RECORDS_MAX,
  type ServerStateFile,
} from "../state/format"
import { listFolder, PrivateDir, yieldToLoop } from "../state/safe-file"
import type { MonitorView } from "./view"

export type LocalSnapshot = {
  /** Every monitor listed by a state file of this project, once each (the newest record wins). */
  monitors: MonitorView[]
  /** Short notes for the person: unreadable files, files of another format. Never a stack trace. */
  notes: string[]
  /** Pids of live servers with a readable state file. */
  liveServers: number[]
}

export type LocalStateDeps = {
  isServerAlive?: (pid: number, pidStartTime: string | undefined) => boolean
  /** Records read before, by name, reused while the file is unchanged (the TUI keeps one across refreshes). */
  cache?: Map<string, CachedRecord>
  yieldToLoop?: () => Promise<void>
}

/** A record as it was parsed, and the version of the file (inode, size, times) it was parsed from. */
export type CachedRecord = { version: string; parsed: ParseResult }

type Counts = { unreadable: number; otherFormat: number; untrusted: number }

/** The server state files of one project folder, at most STATE_RECORDS_MAX, one per turn of the event loop. */
export async function readLocalState(projectDir: string, deps: LocalStateDeps = {}): Promise<LocalSnapshot> {
  const snapshot: LocalSnapshot = { monitors: [], notes: [], liveServers: [] }
  const done = await listFolder(PrivateDir.open(projectDir), async (dir, listed) => {
    const names = listed.filter((name) => name.startsWith("server-") && name.endsWith(".json")).sort()
    const read = names.slice(0, STATE_RECORDS_MAX)
    const counts: Counts = { unreadable: 0, otherFormat: 0, untrusted: 0 }
    const newest = new Map<string, { view: MonitorView; updatedAt: number }>()
    for (const name of read) {
      await (deps.yieldToLoop ?? yieldToLoop)()
      const file = readRecord(dir, name, counts, deps.cache)
      if (file) addRecord(snapshot, newest, file, deps.isServerAlive ?? isServerAlive)
    }
    for (const name of deps.cache?.keys() ?? []) if (!read.includes(name)) deps.cache?.delete(name)
    snapshot.monitors = [...newest.values()].map((entry) => entry.view)
    snapshot.notes.push(...notesOf(counts, names.length - read.length))
  })
  if (!done.ok && done.reason !== "ENOENT")
    snapshot.notes.push(`monitor state folder not read: ${projectDir}: ${done.reason}`)
  return snapshot
}

/** One record, from the cache while its file is unchanged; undefined (counted) when it cannot be used. */
function readRecord(dir: PrivateDir, name: string, counts: Counts, cache?: Map<string, CachedRecord>) {
  const stats = dir.stats(name)
  if (!stats) return undefined // removed since the listing: its server ended
  const version = `${stats.ino}:${stats.size}:${stats.mtimeMs}:${stats.ctimeMs}`
  let parsed = cache?.get(name)?.version === version ? cache.get(name)?.parsed : undefined
  if (!parsed) {
    const read = dir.read(name, STATE_FILE_MAX_BYTES)
    if (!read.ok) {
      if (read.reason !== "ENOENT") counts.untrusted += 1
      return undefined
    }
    parsed = parseStateFile(read.text)
    cache?.set(name, { version, parsed })
  }
  if (parsed.ok) return parsed.file
  if (parsed.error.startsWith("unknown format")) counts.otherFormat += 1
  else counts.unreadable += 1
  return undefined
}

/** A record's monitors into the snapshot: the newest record of a monitor wins. */
function addRecord(
  snapshot: LocalSnapshot,
  newest: Map<string, { view: MonitorView; updatedAt: number }>,
  file: ServerStateFile,
  isAlive: NonNullable<LocalStateDeps["isServerAlive"]>,
): void {
  const { server, monitors } = file
  const alive = safely(() => isAlive(server.pid, server.pidStartTime), false)
  if (alive) snapshot.liveServers.push(server.pid)
  for (const monitor of monitors) {
    const { pid: _pid, pidStartTime: _start, wakePending: _owed, tokenHash: _proof, ...rest } = monitor
    // Its server is gone and no live server took the record over: say so, never "running".
    const lost = !alive && monitor.status.kind === "running"
    const view: MonitorView = {
      ...rest,
      ...(lost ? { status: { kind: "lost", survivorPid: undefined } } : {}),
      serverPid: alive ? server.pid : undefined,
    }
    const seen = newest.get(view.id)
    if (!seen || seen.updatedAt < server.updatedAt) newest.set(view.id, { view, updatedAt: server.updatedAt })
  }
}

function notesOf({ unreadable, untrusted, otherFormat }: Counts, notRead: number): string[] {
  const files = (n: number) => (n === 1 ? "file" : "files")
  return [
    unreadable > 0 && `${unreadable} unreadable monitor state ${files(unreadable)} skipped`,
    untrusted > 0 &&
      `${untrusted} untrusted ${files(untrusted)} in the monitor state folder skipped (a symlink, FIFO or device, someone else's, writable by others, or too large)`,
    otherFormat > 0 &&
      `${otherFormat} state ${files(otherFormat)} from another opencode-monitor version skipped: update both parts to the same version`,
    notRead > 0 &&
      `${notRead} more monitor state ${files(notRead)} not read: at most ${STATE_RECORDS_MAX} are; remove the ones of servers that no longer run`,
  ].filter((note) => typeof note === "string")
}

/** The ended monitors the TUI saw (at most `max`) stay after the state file drops them, so the sidebar counts them. */
export function withRemembered(
  memory: Map<string, MonitorView>,
  current: readonly MonitorView[],
  max = 200,
): MonitorView[] {
  const present = new Set(current.map((m) => m.id))
  for (const monitor of current) {
    if (monitor.status.kind === "running") continue
    memory.delete(monitor.id) // re-inserted last: the newest stay when the map is trimmed
    memory.set(monitor.id, monitor)
  }
  for (const id of memory.keys()) {
    if (memory.size <= max) break
    memory.delete(id)
  }
  return [
    ...current,
    ...[...memory.values()].filter((m) => !present.has(m.id)).map((m) => ({ ...m, serverPid: undefined })),
  ]
}

/** Is the process alive and, when its start time is known, still the same process (not a reused pid)? */
export function isServerAlive(
  pid: number,
  pidStartTime: string | undefined,
  table: ProcessTable = processTable,
): boolean {
  const start = pidStartTime || undefined
  return table.cheap ? runsAs(table.cheap.read([pid])[0], start) : lastAnswer(pid, start, table)
}

// Without a cheap read (ps runs a program), the last background read's answer; one not read yet counts as alive.
const answers = new Map<string, boolean>()
const reading = new Set<string>()

function lastAnswer(pid: number, start: string | undefined, table: ProcessTable): boolean {
  const key = `${pid}:${start}`
  if (!reading.has(key)) {
    reading.add(key)
    mayStillRun(pid, start, table)
      .then((alive) => {
        answers.delete(key)
        answers.set(key, alive)
        if (answers.size > 256) answers.delete(answers.keys().next().value as string)
      })
      .catch(() => {})
      .finally(() => reading.delete(key))
  }
  return answers.get(key) ?? true
}

/** `fn`'s value, or `fallback` when it throws: nothing the TUI part reads may throw onto the screen. */
export const safely = <T>(fn: () => T, fallback: T): T => attempt(fn) ?? fallback
