import { renameSync, rmSync } from "node:fs"
import { join } from "node:path"
import { readBack } from "../delivery/history"
import type { SessionApi, SessionMessage } from "../delivery/session-api"
import { NO_DROPS, type OutputBatch, sizeOf } from "../pipeline/batcher"
import { textLine } from "../pipeline/line"
import { renderedSize } from "../pipeline/render"
import { mayStillRun, type ProcessTable, processTable, serverIdentity } from "../process/process-table"
import { liveGroupMembers, signalGroup, waitUntil } from "../process/process-group"
import { formatStatus, type MonitorStatus, parseEnvelopes } from "../codec"
import { type Logger, namedLogger } from "../log"
import {
  type MonitorStateEntry,
  parseStateFile,
  projectStateDir,
  STATE_FILE_MAX_BYTES,
  type ServerStateFile,
} from "./format"
import { historyShowsStart, type ProcessFacts, proveLeader, tableFacts } from "./recovery-proof"
import { inodeOf, listPrivateDir, readPrivateFile, SkipLog } from "./safe-file"

type Owner = { pid: number; pidStartTime: string | undefined }

export type RecoveryDeps = {
  directory: string
  api: Pick<SessionApi, "recentMessages" | "sessionExists" | "log">
  /** Hands the `lost` terminal batch to delivery (routing, gates, agent and model as for any wake). */
  deliver: (batch: OutputBatch, label: string, sessionID: string, history: readonly SessionMessage[]) => Promise<void>
  /** Resolves once these monitors' wakes have left the delivery queues (sent or given up). */
  whenDelivered?: (monitors: { id: string; sessionID: string }[]) => Promise<void>
  killGraceMs: number
  env?: Record<string, string | undefined>
  /** This server process; defaults to process.pid and its /proc start time. */
  self?: Owner
  /** The process table (process/process-table.ts); default this server's, /proc or ps. */
  table?: ProcessTable
  /** Process checks, injectable for tests; default the table's. */
  mayStillRun?: (pid: number, startTime: string | undefined) => Promise<boolean>
  /** What the leader proof reads about processes (recovery-proof.ts); default the table's. */
  facts?: ProcessFacts
}

/** What recovery did with one monitor a dead server recorded as running. */
export type RecoveredMonitor = {
  id: string
  sessionID: string
  outcome: "reported" | "session_gone" | "already_reported" | "unproven_session"
  survivorPid: number | undefined
}

const logOf = (deps: RecoveryDeps): Logger => namedLogger(deps.api, "recovery")

const SAFE_ID = /^[A-Za-z0-9_-]{1,128}$/
// `server-<pid>-<start>[-<instance>].json`: one file per plugin instance of a server process.
const SERVER_FILE = /^server-(\d+)-([^.-]+)(?:-[0-9a-z]+)?\.json$/
// A file a recovering server took over: `claimed-<pid>-<start>--<the original name>`.
const CLAIMED_FILE = /^claimed-(\d+)-([^-]+)--(server-\d+-[^.]+\.json)$/

/**
 * When the plugin loads: every monitor that a dead server process of this project
 * recorded as running is reported once to its session as a terminal wake with `Status: lost`;
 * one that had ended but whose exit notice was still queued gets that notice, as it ended.
 * A live server's file is never touched; a dead one's is claimed by an atomic rename first, so
 * two servers starting on the same data never both report it. Never throws: unreadable files
 * are skipped with a log line.
 */
export async function recoverLostMonitors(deps: RecoveryDeps): Promise<RecoveredMonitor[]> {
  const dir = projectStateDir(deps.directory, deps.env)
  const self = deps.self ?? (await serverIdentity(deps.table))
  const skips = new SkipLog((message, extra) => logOf(deps).warn(message, extra))
  const listed = listPrivateDir(dir)
  if (!listed.ok) {
    // ENOENT: no record yet, nothing ever ran here. Anything else is not the plugin's folder.
    if (listed.reason !== "ENOENT") skips.skip(dir, listed.reason)
    return []
  }
  const names = listed.names
  const recovered: RecoveredMonitor[] = []
  const claimedPaths: string[] = []
  for (const name of names.sort()) {
    const claimed = await claim(deps, dir, name, self, skips)
    if (!claimed) continue
    claimedPaths.push(claimed.path)
    for (const entry of claimed.file.monitors) {
      // Ended with its notice delivered (or stopped on request): nothing is owed.
      if (entry.status.kind !== "running" && !entry.wakePending) continue
      if (!SAFE_ID.test(entry.id) || !SAFE_ID.test(entry.sessionID)) {
        // The ids land in an envelope header and a request path: a record is data, not trusted.
        logOf(deps).warn("ignoring a malformed entry in a monitor state file", { file: claimed.path })
        continue
      }
      recovered.push(await reportLost(deps, entry))
    }
  }
  const records = names.filter((name) => SERVER_FILE.test(name) || CLAIMED_FILE.test(name)).length
  if (records > 0) {
    logOf(deps).info("restart recovery looked at the monitor state folder", {
      folder: dir,
      files: records,
      claimed: claimedPaths.length,
      reported: recovered.filter((r) => r.outcome === "reported").length,
    })
  }
  const reported = recovered.filter((r) => r.outcome === "reported")
  // Until the notices are out the claims stay: if this server dies too, the next one takes over
  // (and finds what was already delivered in the session history).
  if (reported.length > 0 && deps.whenDelivered) await deps.whenDelivered(reported)
  for (const path of claimedPaths) removeQuietly(path)
  return recovered
}

/** Takes a dead server's file for this process; undefined when there is nothing to take. */
async function claim(
  deps: RecoveryDeps,
  dir: string,
  name: string,
  self: Owner,
  skips: SkipLog,
): Promise<{ path: string; file: ServerStateFile } | undefined> {
  const server = SERVER_FILE.exec(name)
  const taken = CLAIMED_FILE.exec(name)
  const match = server ?? taken
  if (!match) {
    // Temp files, the stop-requests folder and anything else are not records.
    if (name.endsWith(".json"))
      logOf(deps).warn("ignoring a foreign file in the monitor state folder", { file: join(dir, name) })
    return undefined
  }
  const owner: Owner = { pid: Number(match[1]), pidStartTime: match[2] === "unknown" ? undefined : match[2] }
  if (owner.pid === self.pid && owner.pidStartTime === self.pidStartTime) return undefined
  const alive = deps.mayStillRun ?? ((pid: number, start: string | undefined) => mayStillRun(pid, start, deps.table))
  // A server (or a recovering server) that may still run owns its file: never touched.
  if (await alive(owner.pid, owner.pidStartTime)) return undefined

  const path = join(dir, name)
  const read = readPrivateFile(path, STATE_FILE_MAX_BYTES)
  if (!read.ok) {
    // ENOENT: another server claimed it a moment ago. Anything else is skipped, never followed or removed.
    if (read.reason !== "ENOENT") skips.skip(path, read.reason)
    return undefined
  }
  const parsed = parseStateFile(read.text)
  if (!parsed.ok) {
    logOf(deps).warn("ignoring an unreadable monitor state file", { file: path, error: parsed.error })
    return undefined
  }
  if (parsed.file.server.directory !== deps.directory) {
    logOf(deps).warn("ignoring a monitor state file of another directory", {
      file: path,
      directory: parsed.file.server.directory,
    })
    return undefined
  }
  const original = taken ? (taken[3] as string) : name
  const claimedPath = join(dir, `claimed-${self.pid}-${self.pidStartTime ?? "unknown"}--${original}`)
  try {
    // Atomic: of two servers renaming the same file, exactly one succeeds.
    renameSync(path, claimedPath)
  } catch {
    return undefined
  }
  if (inodeOf(claimedPath) !== read.ino) {
    // Swapped between the read and the rename: what was taken is not what was read. Put it back.
    skips.skip(path, "replaced while it was read")
    try {
      renameSync(claimedPath, path)
    } catch {}
    return undefined
  }
  return { path: claimedPath, file: parsed.file }
}

/** The session's history, far enough back to see every envelope of this monitor; empty when unreadable. */
async function sessionHistory(deps: RecoveryDeps, entry: MonitorStateEntry): Promise<SessionMessage[]> {
  try {
    // To the person's message before its start.
    return await readBack(
      deps.api,
      entry.sessionID,
      (messages) =>
        historyShowsStart(messages, entry.id) ||
        messages.some((m) => m.role === "user" && !m.synthetic && m.created <= entry.startedAt),
    )
  } catch {
    // Unknown history: nothing proves the session is the monitor's, so nothing is delivered.
    return []
  }
}

/** The terminal batch a recovered monitor's notice carries: its recorded last lines and its status. */
function terminalBatch(entry: MonitorStateEntry, batchSeq: number, status: MonitorStatus): OutputBatch {
  const lines = entry.lastLines.map((recorded) => {
    const line = textLine(recorded.seq, recorded.stream, recorded.text)
    line.size = renderedSize(line)
    return line
  })
  return {
    monitorId: entry.id,
    batchSeq,
    lines,
    bytes: sizeOf(lines),
    stillRunning: false,
    status,
    dropped: NO_DROPS,
  }
}

async function reportLost(deps: RecoveryDeps, entry: MonitorStateEntry): Promise<RecoveredMonitor> {
  const result = { id: entry.id, sessionID: entry.sessionID, survivorPid: undefined as number | undefined }
  const fields = { monitorId: entry.id, sessionID: entry.sessionID, label: entry.label }
  // An exit whose notice was still queued is reported as it ended; a running one was cut off.
  const ended = entry.status.kind === "running" ? undefined : recorded(entry.status)
  let unverified: { pid: number; reason: string } | undefined
  if (!ended) {
    const survivor = await stopSurvivor(deps, entry)
    result.survivorPid = survivor.survivorPid
    unverified = survivor.unverified
  }
  if ((await deps.api.sessionExists(entry.sessionID)) === false) {
    logOf(deps).info("lost monitor not reported: its session no longer exists", fields)
    return { ...result, outcome: "session_gone" }
  }
  const history = await sessionHistory(deps, entry)
  if (!historyShowsStart(history, entry.id)) {
    // A record names any session it likes: only one whose history shows this monitor's start is woken.
    logOf(deps).warn(
      "a state record's monitor not reported: its session's history shows no monitor_start of it",
      fields,
    )
    return { ...result, outcome: "unproven_session" }
  }
  const seen = envelopesOf(history, entry.id)
  if (seen.some((e) => e.status !== "running")) {
    logOf(deps).info("lost monitor not reported: its session already has its exit notice", fields)
    return { ...result, outcome: "already_reported" }
  }
  const status = ended ?? { kind: "lost", survivorPid: result.survivorPid, ...(unverified ? { unverified } : {}) }
  const batch = terminalBatch(entry, Math.max(0, ...seen.map((e) => e.batch)) + 1, status)
  logOf(deps).info(
    ended
      ? "delivering an exit notice its stopped server still owed"
      : "reporting a monitor lost when its server stopped",
    {
      ...fields,
      status: formatStatus(batch.status),
      survivorPid: result.survivorPid,
    },
  )
  await deps.deliver(batch, entry.label, entry.sessionID, history)
  return { ...result, outcome: "reported" }
}

/**
 * The watchdog should have ended the group when the server died. A leader still running is
 * signalled only when it proves it is the recorded monitor's (recovery-proof.ts); its group
 * (which cannot change hands while it has members) is then ended like any stop. `survivorPid`
 * when something of the group survives even SIGKILL; `unverified` when a process runs under
 * the recorded pid that does not prove it is the monitor's (never signalled).
 */
async function stopSurvivor(
  deps: RecoveryDeps,
  entry: MonitorStateEntry,
): Promise<{ survivorPid?: number; unverified?: { pid: number; reason: string } }> {
  const facts = deps.facts ?? tableFacts(deps.table)
  const proof = await proveLeader(entry, facts)
  if (proof.kind === "gone") return {}
  if (proof.kind === "unverified") {
    logOf(deps).warn("a state record names a running process that does not prove it is the monitor's; not signalled", {
      monitorId: entry.id,
      pid: entry.pid,
      reason: proof.reason,
    })
    return { unverified: { pid: entry.pid, reason: proof.reason } }
  }
  logOf(deps).warn("a lost monitor's process still runs; stopping its process group", {
    monitorId: entry.id,
    pid: entry.pid,
  })
  const groupGone = async () => (await liveGroupMembers(entry.pid, deps.table ?? processTable)).length === 0
  for (const [signal, waitMs] of [
    ["SIGTERM", deps.killGraceMs],
    ["SIGKILL", 2_000],
  ] as const) {
    if (!(await groupGone())) signalGroup(entry.pid, signal)
    if (await waitUntil(groupGone, waitMs)) return {}
  }
  return { survivorPid: entry.pid }
}

/** A status a dead server's record claims: shown as its claim, never as an exit this server saw. */
function recorded(status: MonitorStatus): MonitorStatus {
  return { ...status, recorded: true } as MonitorStatus
}

/** This monitor's envelopes in a session history: their batch numbers and statuses. */
function envelopesOf(history: readonly SessionMessage[], monitorId: string): { batch: number; status: string }[] {
  const out: { batch: number; status: string }[] = []
  for (const message of history) {
    if (message.role !== "user" || !message.synthetic) continue
    for (const head of parseEnvelopes(message.text))
      if (head.monitorId === monitorId) out.push({ batch: head.batch, status: head.statusText })
  }
  return out
}

function removeQuietly(path: string): void {
  try {
    rmSync(path, { force: true })
  } catch {
    // A leftover claimed file of a finished recovery is harmless: its owner (this server) is alive,
    // and once it is gone the next server finds every entry already reported in the history.
  }
}
