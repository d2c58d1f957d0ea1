import { createHash } from "node:crypto"
import { homedir } from "node:os"
import { join } from "node:path"
import { type Ending, isStopReason, type Leftovers, type MonitorStatus } from "../codec"
import type { MonitorInfo } from "../monitor-run"
import type { ProcessIdentity } from "../process/process-table"

// A server's monitors on disk, for the TUI and a restarted server: labels only (never the command), all bounded.
export const STATE_FORMAT = "opencode-monitor/state@2"

/** At most this many last lines per monitor, each at most STATE_LINE_TEXT_MAX characters. */
export const STATE_LAST_LINES = 5
export const STATE_LINE_TEXT_MAX = 512
/** At most this many monitors per file (running first, then the newest ended ones). */
export const STATE_MAX_MONITORS = 64
/** A server's record is small (64 monitors × 5 lines of 512 characters); a larger file is not read. */
export const STATE_FILE_MAX_BYTES = 1024 * 1024
/** A state folder whose own size (it grows with its entries: ~1 500 names on ext4) is over this is not listed. */
export const STATE_FOLDER_MAX_BYTES = 64 * 1024
/** At most this many server records are read per pass (the rest are counted); real use has a handful. */
export const STATE_RECORDS_MAX = 32

export type StateLine = { stream: "stdout" | "stderr"; seq: number; text: string }

export type MonitorStateEntry = {
  id: string
  sessionID: string
  label: string
  startedAt: number
  endedAt: number | undefined
  /** The status itself, not its text: a restarted server delivers exactly this. */
  status: MonitorStatus
  /** How it came to its end, once decided (who stopped it, for a stop). */
  ending: Ending | undefined
  /** The process group leader, and its start time (process-table.ts) to prove identity. */
  pid: number
  pidStartTime: string | undefined
  linesSeen: number
  lastLines: StateLine[]
  /** When its deadline stops it; absent: no deadline. */
  deadlineAt?: number
  /** It ended, but its exit notice had not reached the session: a restarted server delivers it. */
  wakePending?: boolean
  /** sha256 of the token in the monitor's environment: recovery signals only a leader that carries it. */
  tokenHash?: string
}

/** The last STATE_LAST_LINES lines, each cut to STATE_LINE_TEXT_MAX characters: what a record holds. */
function boundedLines(lines: readonly StateLine[]): StateLine[] {
  return lines
    .slice(-STATE_LAST_LINES)
    .map(({ stream, seq, text }) => ({ stream, seq, text: text.slice(0, STATE_LINE_TEXT_MAX) }))
}

function isStateLine(line: unknown): line is StateLine {
  return isObject(line) && isInt(line.seq) && typeof line.text === "string" && /^std(out|err)$/.test(`${line.stream}`)
}

export type ServerStateFile = {
  format: typeof STATE_FORMAT
  server: ProcessIdentity & { directory: string; updatedAt: number }
  monitors: MonitorStateEntry[]
}

/** The process group leader as it started: its start time and token hash prove it is the monitor's later. */
type Leader = { pid: number; startTime?: string; tokenHash?: string }

/** A monitor as its record holds it: its label, never its command; its last lines bounded. */
export function stateEntry(info: MonitorInfo, leader: Leader, lastLines: readonly StateLine[]): MonitorStateEntry {
  return {
    id: info.id,
    sessionID: info.sessionID,
    label: info.label,
    startedAt: info.startedAt,
    endedAt: info.endedAt,
    status: info.status,
    ending: info.ending,
    pid: leader.pid,
    pidStartTime: leader.startTime,
    linesSeen: info.counters.total,
    lastLines: boundedLines(lastLines),
    ...(info.timeoutMs !== undefined ? { deadlineAt: info.startedAt + info.timeoutMs } : {}),
    ...(leader.tokenHash ? { tokenHash: leader.tokenHash } : {}),
  }
}

/** `running` ones first (oldest first), then ended ones, newest first: the order of a record and of the TUI's lists. */
export function runningFirst<M extends { startedAt: number; endedAt: number | undefined }>(
  monitors: readonly M[],
  running: (monitor: M) => boolean,
): M[] {
  const first = monitors.filter(running).sort((a, b) => a.startedAt - b.startedAt)
  const ended = monitors
    .filter((m) => !running(m))
    .sort((a, b) => (b.endedAt ?? b.startedAt) - (a.endedAt ?? a.startedAt))
  return [...first, ...ended]
}

/** `$XDG_STATE_HOME/opencode/opencode-monitor/<hash of the directory>`: a server sees only its project's records. */
export function projectStateDir(directory: string, env: Record<string, string | undefined> = process.env): string {
  const base = env.XDG_STATE_HOME || join(env.HOME || homedir(), ".local", "state")
  return join(base, "opencode", "opencode-monitor", createHash("sha256").update(directory).digest("hex").slice(0, 16))
}

/** One file per plugin instance: opencode may make several for a directory in one server process. */
export function serverStateFileName(pid: number, pidStartTime: string | undefined, instance?: string): string {
  return `server-${pid}-${pidStartTime ?? "unknown"}${instance ? `-${instance}` : ""}.json`
}

export type ParseResult = { ok: true; file: ServerStateFile } | { ok: false; error: string }

/** Reads a state file's text; anything corrupt, partial, foreign or of another format is an error, never a throw. */
export function parseStateFile(text: string): ParseResult {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (error) {
    return { ok: false, error: `not JSON (${error instanceof Error ? error.message : String(error)})` }
  }
  if (!isObject(raw)) return { ok: false, error: "not an object" }
  if (raw.format !== STATE_FORMAT) return { ok: false, error: `unknown format ${JSON.stringify(raw.format)}` }
  const server = raw.server
  if (!isObject(server) || !isInt(server.pid) || typeof server.directory !== "string" || !isInt(server.updatedAt)) {
    return { ok: false, error: "bad server section" }
  }
  if (!Array.isArray(raw.monitors)) return { ok: false, error: "monitors is not a list" }
  const monitors = raw.monitors
    .slice(0, STATE_MAX_MONITORS)
    .map(parseEntry)
    .filter((entry) => entry !== undefined)
  const { pid, directory, updatedAt } = server
  const header = { pid, pidStartTime: asString(server.pidStartTime), directory, updatedAt }
  return { ok: true, file: { format: STATE_FORMAT, server: header, monitors } }
}

function parseEntry(entry: unknown): MonitorStateEntry | undefined {
  if (!isObject(entry)) return undefined
  const { id, sessionID, label, startedAt, endedAt, pid, pidStartTime, linesSeen } = entry
  if (typeof id !== "string" || typeof sessionID !== "string" || typeof label !== "string") return undefined
  if (!isInt(startedAt) || !isInt(pid) || !isInt(linesSeen)) return undefined
  const status = readStatus(entry.status)
  if (!status) return undefined
  const recorded = Array.isArray(entry.lastLines) ? entry.lastLines.slice(-STATE_LAST_LINES) : []
  return {
    id,
    sessionID,
    label,
    startedAt,
    endedAt: isInt(endedAt) ? endedAt : undefined,
    status,
    ending: readEnding(entry.ending),
    pid,
    pidStartTime: asString(pidStartTime),
    linesSeen,
    lastLines: boundedLines(recorded.filter(isStateLine)),
    deadlineAt: isInt(entry.deadlineAt) ? entry.deadlineAt : undefined,
    wakePending: entry.wakePending === true || undefined,
    tokenHash:
      typeof entry.tokenHash === "string" && /^[0-9a-f]{64}$/.test(entry.tokenHash) ? entry.tokenHash : undefined,
  }
}

/** A recorded status, field by field: a record is data a process could have written, not trusted. */
function readStatus(raw: unknown): MonitorStatus | undefined {
  if (!isObject(raw)) return undefined
  const pids = (value: unknown) => (Array.isArray(value) && value.every(isInt) ? value.slice(0, 64) : undefined)
  const leftovers: Leftovers = {
    survivors: pids(raw.survivors),
    pipesHeld: raw.pipesHeld === true || undefined,
    unsearched: pids(raw.unsearched),
    leftBehind: leftBehindOf(raw.leftBehind),
  }
  const signal = (value: unknown) => (typeof value === "string" && /^[A-Z0-9]{1,16}$/.test(value) ? value : null)
  switch (raw.kind) {
    case "running":
      return { kind: "running" }
    case "exited":
      return isInt(raw.code) ? { kind: "exited", code: raw.code, ...leftovers } : undefined
    case "signaled":
      return { kind: "signaled", signal: signal(raw.signal) ?? "unknown", ...leftovers }
    case "timed_out":
      return isInt(raw.afterMs)
        ? { kind: "timed_out", afterMs: raw.afterMs, signal: signal(raw.signal), ...leftovers }
        : undefined
    case "stopped":
      return { kind: "stopped", signal: signal(raw.signal), byPerson: raw.byPerson === true || undefined, ...leftovers }
    case "lost":
      return { kind: "lost", survivorPid: isInt(raw.survivorPid) ? raw.survivorPid : undefined, ...leftovers }
    default:
      return undefined
  }
}

/** What a run left behind and stopped, as the record names it: pids and plain short names only. */
function leftBehindOf(raw: unknown): Leftovers["leftBehind"] {
  if (!Array.isArray(raw)) return undefined
  const leftBehind = raw
    .slice(0, 64)
    .filter((p): p is { pid: number; name: string } => isObject(p) && isInt(p.pid) && typeof p.name === "string")
    .map((p) => ({ pid: p.pid, name: p.name.replace(/[^A-Za-z0-9._+-]/g, "?").slice(0, 16) }))
  return leftBehind.length > 0 ? leftBehind : undefined
}

function readEnding(raw: unknown): Ending | undefined {
  if (!isObject(raw)) return undefined
  if (raw.reason === "exit" || raw.reason === "deadline") return { reason: raw.reason }
  return raw.reason === "stop" && isStopReason(raw.by) ? { reason: "stop", by: raw.by } : undefined
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value)
}

const asString = (value: unknown) => (typeof value === "string" ? value : undefined)

export function isInt(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value)
}
