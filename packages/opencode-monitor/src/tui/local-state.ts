import { join } from "node:path"
import { formatStatus } from "../codec"
import { mayStillRun, mayStillRunNow, type ProcessTable, processTable } from "../process/process-table"
import { type MonitorStateEntry, parseStateFile, STATE_FILE_MAX_BYTES } from "../state/format"
import { listPrivateDir, readPrivateFile } from "../state/safe-file"
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
  readDir?: (dir: string) => string[]
  /** The file's text; throws ENOENT when it is gone, `UntrustedFile` when it may not be trusted. */
  readFile?: (path: string) => string
}

/** A file in the state folder that is not the user's own regular file within the size bound. */
class UntrustedFile extends Error {
  override name = "UntrustedFile"
}

/** The state folder and its files as safe-file.ts allows them: never a symlink, FIFO or device, never blocking. */
function listTrusted(dir: string): string[] {
  const listed = listPrivateDir(dir)
  if (!listed.ok && listed.reason === "ENOENT") return []
  if (!listed.ok) throw new UntrustedFile(`${dir}: ${listed.reason}`)
  return listed.names
}

function readTrusted(path: string): string {
  const read = readPrivateFile(path, STATE_FILE_MAX_BYTES)
  if (read.ok) return read.text
  throw read.reason === "ENOENT" ? Object.assign(new Error(path), { code: "ENOENT" }) : new UntrustedFile(read.reason)
}

/** Reads every server state file of one project folder. Missing folder: nothing. Never throws. */
export function readLocalState(projectDir: string, deps: LocalStateDeps = {}): LocalSnapshot {
  const isAlive = deps.isServerAlive ?? isServerAlive
  const readDir = deps.readDir ?? listTrusted
  const readFile = deps.readFile ?? readTrusted
  const snapshot: LocalSnapshot = { monitors: [], notes: [], liveServers: [] }
  let names: string[]
  try {
    names = readDir(projectDir).filter((name) => name.startsWith("server-") && name.endsWith(".json"))
  } catch (error) {
    if (error instanceof UntrustedFile) snapshot.notes.push(`monitor state folder not read: ${error.message}`)
    return snapshot
  }
  const newest = new Map<string, { view: MonitorView; updatedAt: number }>()
  let unreadable = 0
  let otherFormat = 0
  let untrusted = 0
  for (const name of names.sort()) {
    let text: string
    try {
      text = readFile(join(projectDir, name))
    } catch (error) {
      // Else removed between readdir and read: its server ended.
      if (error instanceof UntrustedFile) untrusted += 1
      continue
    }
    const parsed = parseStateFile(text)
    if (!parsed.ok) {
      if (parsed.error.startsWith("unknown format")) otherFormat += 1
      else unreadable += 1
      continue
    }
    const { server, monitors } = parsed.file
    const alive = safe(() => isAlive(server.pid, server.pidStartTime), false)
    if (alive) snapshot.liveServers.push(server.pid)
    for (const monitor of monitors) {
      const view = viewOf(monitor, alive ? server.pid : undefined)
      if (!alive && monitor.status.kind === "running") {
        // Its server is gone and no live server took the record over: say so, never "running".
        view.statusKind = "lost"
        view.status = "lost (its opencode server ended)"
      }
      const seen = newest.get(monitor.id)
      if (!seen || seen.updatedAt < server.updatedAt) newest.set(monitor.id, { view, updatedAt: server.updatedAt })
    }
  }
  snapshot.monitors = [...newest.values()].map((entry) => entry.view)
  if (unreadable > 0)
    snapshot.notes.push(`${unreadable} unreadable monitor state ${unreadable === 1 ? "file" : "files"} skipped`)
  if (untrusted > 0) {
    snapshot.notes.push(
      `${untrusted} untrusted ${untrusted === 1 ? "file" : "files"} in the monitor state folder skipped (a symlink, FIFO or device, someone else's, writable by others, or too large)`,
    )
  }
  if (otherFormat > 0) {
    snapshot.notes.push(
      `${otherFormat} state ${otherFormat === 1 ? "file" : "files"} from another opencode-monitor version skipped: update both parts to the same version`,
    )
  }
  return snapshot
}

function viewOf(entry: MonitorStateEntry, serverPid: number | undefined): MonitorView {
  const { status, ending, wakePending: _owed, tokenHash: _proof, ...rest } = entry
  return {
    ...rest,
    statusKind: status.kind,
    status: formatStatus(status),
    stoppedBy: ending?.reason === "stop" ? ending.by : undefined,
    serverPid,
  }
}

/**
 * The state file drops an ended monitor after a while; the TUI keeps the ones it saw, so the
 * sidebar can still count them. `memory` is the TUI's own map; at most `max` are kept.
 */
export function withRemembered(
  memory: Map<string, MonitorView>,
  current: readonly MonitorView[],
  max = 200,
): MonitorView[] {
  const present = new Set(current.map((m) => m.id))
  for (const monitor of current) {
    if (monitor.statusKind === "running") continue
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
  return mayStillRunNow(pid, start, table) ?? lastAnswer(pid, start, table)
}

// Without a cheap read (ps runs a program), the answer of the last read of that server, made in
// the background: the TUI reads again at its next refresh. A server not read yet counts as alive.
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

function safe<T>(fn: () => T, fallback: T): T {
  try {
    return fn()
  } catch {
    return fallback
  }
}
