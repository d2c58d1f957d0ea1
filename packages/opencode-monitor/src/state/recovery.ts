import { readBack } from "../delivery/history"
import type { SessionApi, SessionMessage } from "../delivery/session-api"
import { NO_DROPS, type OutputBatch, sizeOf } from "../pipeline/batcher"
import { textLine } from "../pipeline/line"
import { renderedSize } from "../pipeline/render"
import { mayStillRun, type ProcessIdentity, type ProcessTable } from "../process/process-table"
import { escalate, liveGroupMembers, signalGroup } from "../process/process-group"
import { formatStatus, type MonitorStatus } from "../codec"
import { type Logger, namedLogger } from "../log"
import {
  type MonitorStateEntry,
  parseStateFile,
  projectStateDir,
  STATE_FILE_MAX_BYTES,
  STATE_RECORDS_MAX,
  type ServerStateFile,
} from "./format"
import { historyShowsStart, type ProcessFacts, proveLeader, tableFacts } from "./recovery-proof"
import { listFolder, PrivateDir, SkipTally, yieldToLoop } from "./safe-file"

export type RecoveryDeps = {
  directory: string
  api: Pick<SessionApi, "recentMessages" | "sessionExists" | "log">
  /** Hands the `lost` terminal batch to delivery (routing, gates, agent and model as for any wake). */
  deliver: (batch: OutputBatch, label: string, sessionID: string, history: readonly SessionMessage[]) => Promise<void>
  /** Resolves once these monitors' wakes have left the delivery queues (sent or given up). */
  whenDelivered?: (monitors: { id: string; sessionID: string }[]) => Promise<void>
  killGraceMs: number
  env?: Record<string, string | undefined>
  /** This server: its claims carry its pid and start time. */
  self: ProcessIdentity
  // For tests; each defaults to this server's own.
  table?: ProcessTable
  mayStillRun?: (pid: number, startTime: string | undefined) => Promise<boolean>
  facts?: ProcessFacts
  yieldToLoop?: () => Promise<void>
  /** false: act as on a system without /proc/self/fd (macOS), where nothing is renamed or removed. */
  descriptorPaths?: boolean
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
 * At load, reports what dead servers of this project owed: a monitor cut off as `lost`, a queued exit notice
 * as it ended. A record is claimed by an atomic rename first, so two starting servers never both report it.
 */
export async function recoverLostMonitors(deps: RecoveryDeps): Promise<RecoveredMonitor[]> {
  const path = projectStateDir(deps.directory, deps.env)
  const dir = PrivateDir.open(path, "shared", deps.descriptorPaths ?? true)
  const done = await listFolder(dir, (dir, names) => recoverFrom(dir, names, deps))
  if (done.ok) return done.value
  // ENOENT: no record yet, nothing ever ran here. Anything else is not the plugin's folder.
  if (done.reason !== "ENOENT") {
    logOf(deps).warn("skipping an untrusted entry in the monitor state folder", { path, reason: done.reason })
  }
  return []
}

async function recoverFrom(dir: PrivateDir, names: string[], deps: RecoveryDeps): Promise<RecoveredMonitor[]> {
  const { self } = deps
  const skipped = new SkipTally()
  // Temp files and the stop-requests folder are the plugin's; any other JSON file is not.
  for (const name of names) if (!isRecordName(name) && name.endsWith(".json")) skipped.add("foreign", name)
  const records = names.filter(isRecordName).sort()
  const recovered: RecoveredMonitor[] = []
  const claimed: Claim[] = []
  for (const name of records.slice(0, STATE_RECORDS_MAX)) {
    await (deps.yieldToLoop ?? yieldToLoop)()
    const claim = await claimRecord(deps, dir, name, self, skipped)
    if (!claim) continue
    claimed.push(claim)
    for (const entry of claim.file.monitors) {
      // Ended with its notice delivered (or stopped on request): nothing is owed.
      if (entry.status.kind !== "running" && !entry.wakePending) continue
      // The ids land in an envelope header and a request path: a record is data, not trusted.
      if (SAFE_ID.test(entry.id) && SAFE_ID.test(entry.sessionID)) recovered.push(await reportLost(deps, entry))
      else skipped.add("entries with malformed ids", claim.name)
    }
  }
  const reported = recovered.filter((r) => r.outcome === "reported")
  const left = records.length - STATE_RECORDS_MAX
  // One line per start, however many files: a warning when something was skipped or left for the next start.
  if (records.length > 0 || skipped.count > 0) {
    logOf(deps)[skipped.count > 0 || left > 0 ? "warn" : "info"](
      "restart recovery looked at the monitor state folder",
      {
        folder: dir.path,
        files: records.length,
        claimed: claimed.length,
        reported: reported.length,
        ...(skipped.count > 0 ? { skipped: skipped.toString() } : {}),
        ...(left > 0 ? { leftForTheNextStart: left, bound: STATE_RECORDS_MAX } : {}),
      },
    )
  }
  // The claims stay until the notices are out: if this server dies too, the next one takes over and
  // finds in the session history what was delivered (which also makes a claim left behind harmless).
  if (reported.length > 0 && deps.whenDelivered) await deps.whenDelivered(reported)
  for (const claim of claimed) if (claim.owned) dir.remove(claim.name)
  return recovered
}

const isRecordName = (name: string) => SERVER_FILE.test(name) || CLAIMED_FILE.test(name)

/** `owned`: renamed to this server's claim, removed once its notices are out; not on macOS (not anchored). */
type Claim = { name: string; file: ServerStateFile; owned: boolean }

async function claimRecord(
  deps: RecoveryDeps,
  dir: PrivateDir,
  name: string,
  self: ProcessIdentity,
  skipped: SkipTally,
): Promise<Claim | undefined> {
  const taken = CLAIMED_FILE.exec(name)
  const match = (SERVER_FILE.exec(name) ?? taken) as RegExpExecArray
  const owner: ProcessIdentity = { pid: Number(match[1]), pidStartTime: match[2] === "unknown" ? undefined : match[2] }
  if (owner.pid === self.pid && owner.pidStartTime === self.pidStartTime) return undefined
  const alive = deps.mayStillRun ?? ((pid: number, start: string | undefined) => mayStillRun(pid, start, deps.table))
  // A server (or a recovering server) that may still run owns its file: never touched.
  if (await alive(owner.pid, owner.pidStartTime)) return undefined
  const read = dir.read(name, STATE_FILE_MAX_BYTES)
  if (!read.ok) {
    // ENOENT: another server claimed it a moment ago. Anything else is skipped, never followed or removed.
    if (read.reason !== "ENOENT") skipped.add("untrusted", name, read.reason)
    return undefined
  }
  const parsed = parseStateFile(read.text)
  if (!parsed.ok) {
    skipped.add("unreadable", name, parsed.error)
    return undefined
  }
  if (parsed.file.server.directory !== deps.directory) {
    // Not this project's (forged, or a hash collision), its server dead: nobody will ever report it, so it goes.
    const removed = dir.remove(name)
    skipped.add(removed ? "of another directory, removed" : "of another directory", name, parsed.file.server.directory)
    return undefined
  }
  if (!dir.anchored) return { name, file: parsed.file, owned: false }
  const claimedName = `claimed-${self.pid}-${self.pidStartTime ?? "unknown"}--${taken ? taken[3] : name}`
  // Atomic: of two servers renaming the same file, exactly one succeeds.
  if (!dir.rename(name, claimedName)) return undefined
  if (dir.stats(claimedName)?.ino !== read.ino) {
    // Swapped between the read and the rename: what was taken is not what was read. Put it back.
    skipped.add("replaced while it was read", name)
    dir.rename(claimedName, name)
    return undefined
  }
  return { name: claimedName, file: parsed.file, owned: true }
}

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
  // A running one was cut off; a queued exit notice is reported as the dead server's claim (`recorded`).
  const cutOff = entry.status.kind === "running" ? await stopSurvivor(deps, entry) : undefined
  const status = cutOff ?? ({ ...entry.status, recorded: true } as MonitorStatus)
  const result = { id: entry.id, sessionID: entry.sessionID, survivorPid: cutOff?.survivorPid }
  const fields = { monitorId: entry.id, sessionID: entry.sessionID, label: entry.label }
  if ((await deps.api.sessionExists(entry.sessionID)) === false) {
    logOf(deps).info("lost monitor not reported: its session no longer exists", fields)
    return { ...result, outcome: "session_gone" }
  }
  // Far enough back to see every envelope of this monitor: to its start, or to the person's message before it.
  const farEnough = (messages: readonly SessionMessage[]) =>
    historyShowsStart(messages, entry.id) ||
    messages.some((m) => m.role === "user" && !m.synthetic && m.created <= entry.startedAt)
  // Unknown history: nothing proves the session is the monitor's, so nothing is delivered.
  const history = await readBack(deps.api, entry.sessionID, farEnough).catch(() => [])
  if (!historyShowsStart(history, entry.id)) {
    // A record names any session it likes: only one whose history shows this monitor's start is woken.
    logOf(deps).warn(
      "a state record's monitor not reported: its session's history shows no monitor_start of it",
      fields,
    )
    return { ...result, outcome: "unproven_session" }
  }
  const seen = history.flatMap((message) => message.notes.filter((note) => note.monitorId === entry.id))
  if (seen.some((e) => e.status.kind !== "running")) {
    logOf(deps).info("lost monitor not reported: its session already has its exit notice", fields)
    return { ...result, outcome: "already_reported" }
  }
  const batch = terminalBatch(entry, Math.max(0, ...seen.map((e) => e.batch)) + 1, status)
  logOf(deps).info(
    cutOff
      ? "reporting a monitor lost when its server stopped"
      : "delivering an exit notice its stopped server still owed",
    { ...fields, status: formatStatus(status), survivorPid: result.survivorPid },
  )
  await deps.deliver(batch, entry.label, entry.sessionID, history)
  return { ...result, outcome: "reported" }
}

type Lost = Extract<MonitorStatus, { kind: "lost" }>

/** A surviving leader's group is signalled only if it proves it is the monitor's (a live group cannot change hands). */
async function stopSurvivor(deps: RecoveryDeps, entry: MonitorStateEntry): Promise<Lost> {
  const proof = await proveLeader(entry, deps.facts ?? tableFacts(deps.table))
  if (proof.kind === "gone") return { kind: "lost", survivorPid: undefined }
  const fields = { monitorId: entry.id, pid: entry.pid }
  if (proof.kind === "unverified") {
    const message = "a state record names a running process that does not prove it is the monitor's; not signalled"
    logOf(deps).warn(message, { ...fields, reason: proof.reason })
    return { kind: "lost", survivorPid: undefined, unverified: { pid: entry.pid, reason: proof.reason } }
  }
  logOf(deps).warn("a lost monitor's process still runs; stopping its process group", fields)
  const groupGone = async () => (await liveGroupMembers(entry.pid, deps.table)).length === 0
  const sent = await escalate((signal) => signalGroup(entry.pid, signal), groupGone, deps.killGraceMs)
  const survived = sent === "SIGKILL" && !(await groupGone())
  return { kind: "lost", survivorPid: survived ? entry.pid : undefined }
}
