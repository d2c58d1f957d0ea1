import { randomBytes } from "node:crypto"
import { join } from "node:path"
import { attempt, errorText } from "../errors"
import type { Scheduler } from "../scheduler"
import { FolderWatch } from "./folder-watch"
import { isInt, isObject } from "./format"
import { listFolder, PrivateDir, type Refused, SkipTally, yieldToLoop } from "./safe-file"

/** A person's stop from the TUI: a small file here, addressed to the server that runs the monitor (docs/tui.md). */
const STOP_REQUESTS_FOLDER = "stop-requests"
const STOP_REQUEST_FORMAT = "opencode-monitor/stop@1"

export const stopRequestDir = (projectDir: string): string => join(projectDir, STOP_REQUESTS_FOLDER)

/** `stop-<server pid>-<12 hex>.json` or its temp file: other names, and other servers' requests, stay unread. */
const REQUEST_NAME = /^stop-(\d{1,10})-[0-9a-f]{12}\.json(\.[0-9a-f]{8}\.tmp)?$/

export type StopRequest = {
  /** The server whose state file lists the monitor. */
  serverPid: number
  sessionID: string
  monitorId: string
  requestedAt: number
}

/** A request is taken only this close to its `requestedAt`; one nobody took is removed after this long. */
export const STOP_REQUEST_STALE_MS = 60_000
/** A request is ~150 bytes; a larger file is never read. */
const STOP_REQUEST_MAX_BYTES = 4_096
/** A pass looks at this many entries, then gives the event loop a turn. */
const SCAN_SLICE = 32
/** A pass starts at least this long after the last one ended: a burst of file events costs one pass. */
const STOP_REQUEST_RESCAN_MS = 100

/** Writes a stop request; returns its path. Throws on an I/O error or an unusable folder (the TUI shows it). */
export function writeStopRequest(
  projectDir: string,
  request: Omit<StopRequest, "requestedAt">,
  now = Date.now(),
): string {
  // The server takes requests only from 0600 files in 0700 folders of the user's (safe-file.ts).
  const project = PrivateDir.ensure(projectDir)
  let dir: PrivateDir | undefined
  try {
    dir = project.ensureSubdir(STOP_REQUESTS_FOLDER)
    const overfull = dir.overfull()
    if (overfull) throw new Error(`${dir.path} ${overfull}`)
    const name = `stop-${request.serverPid}-${randomBytes(6).toString("hex")}.json`
    dir.write(name, JSON.stringify({ format: STOP_REQUEST_FORMAT, ...request, requestedAt: now }))
    return dir.pathOf(name)
  } finally {
    dir?.close()
    project.close()
  }
}

export function parseStopRequest(text: string): StopRequest | undefined {
  const r: unknown = attempt(() => JSON.parse(text))
  if (!isObject(r) || r.format !== STOP_REQUEST_FORMAT || !isInt(r.serverPid) || !isInt(r.requestedAt)) return undefined
  if (typeof r.sessionID !== "string" || typeof r.monitorId !== "string") return undefined
  const { serverPid, sessionID, monitorId, requestedAt } = r
  return { serverPid, sessionID, monitorId, requestedAt }
}

export type StopRequestHandler = {
  /** This server's pid: requests addressed to another server are left to it. */
  serverPid: number
  /** Does this plugin instance run it? A server may hold several for one directory: the others leave it. */
  owns: (sessionID: string, monitorId: string) => boolean
  stop: (sessionID: string, monitorId: string) => void
  scheduler?: Scheduler
  now?: () => number
  onError?: (message: string) => void
  yieldToLoop?: () => Promise<void>
  /** false: act as on a system without /proc/self/fd (macOS), where nothing is deleted (for tests). */
  descriptorPaths?: boolean
}

/** What a watcher keeps between passes: the requests it took (where they cannot be deleted), what it logged. */
export type ScanMemory = { taken: Set<string>; logged: Set<string> }

export const newScanMemory = (): ScanMemory => ({ taken: new Set(), logged: new Set() })

/** Logs a problem once while problems last; a clean pass ("") forgets them, so one that comes back is logged again. */
function report(handler: StopRequestHandler, memory: ScanMemory, line: string): void {
  if (!line) memory.logged.clear()
  if (!line || memory.logged.has(line)) return
  if (memory.logged.size >= 16) memory.logged.clear()
  memory.logged.add(line)
  handler.onError?.(line)
}

/** One pass, SCAN_SLICE entries a turn: takes the requests for this instance; removes only taken or stale ones. */
export async function scanStopRequests(
  projectDir: string,
  handler: StopRequestHandler,
  memory: ScanMemory = newScanMemory(),
): Promise<number> {
  const now = handler.now?.() ?? handler.scheduler?.now() ?? Date.now()
  const take = (dir: PrivateDir, names: string[]) =>
    takeRequests({ dir, handler, memory, now, skipped: new SkipTally() }, names)
  try {
    const done = await listFolder(openRequestFolder(projectDir, handler.descriptorPaths ?? true), take)
    if (done.ok) return done.value
    const line = `skipping an untrusted entry in the monitor state folder: ${done.path} (${done.reason})`
    if (done.reason !== "ENOENT") report(handler, memory, line)
  } catch (error) {
    handler.onError?.(`stop requests: ${errorText(error)}`)
  }
  return 0
}

/** The project's folder, then its stop-requests folder through it: both private, neither through a symlink. */
function openRequestFolder(projectDir: string, descriptorPaths: boolean): PrivateDir | Refused {
  const project = PrivateDir.open(projectDir, "private", descriptorPaths)
  if (!(project instanceof PrivateDir)) return project
  try {
    return project.subdir(STOP_REQUESTS_FOLDER, "private")
  } finally {
    project.close()
  }
}

type Pass = {
  dir: PrivateDir
  handler: StopRequestHandler
  memory: ScanMemory
  now: number
  skipped: SkipTally
}

async function takeRequests(pass: Pass, names: string[]): Promise<number> {
  const { handler, memory } = pass
  let stopped = 0
  for (const [index, name] of names.entries()) {
    if (index > 0 && index % SCAN_SLICE === 0) await (handler.yieldToLoop ?? yieldToLoop)()
    if (takeOne(pass, name)) stopped += 1
  }
  // Bounded by the folder: a name no longer listed is forgotten.
  const present = new Set(names)
  for (const name of memory.taken) if (!present.has(name)) memory.taken.delete(name)
  const skipped = pass.skipped.toString()
  report(handler, memory, skipped && `skipping entries of the stop-requests folder ${pass.dir.path}: ${skipped}`)
  return stopped
}

const stale = (pass: Pass, mtimeMs: number | undefined) =>
  mtimeMs !== undefined && pass.now - mtimeMs > STOP_REQUEST_STALE_MS

/** True when it took a well-formed private request of this instance's; anything else is counted or removed once old. */
function takeOne(pass: Pass, name: string): boolean {
  const { dir, handler } = pass
  const match = REQUEST_NAME.exec(name)
  if (!match) {
    pass.skipped.add("not named as a stop request", name)
    return false
  }
  if (match[2] !== undefined || Number(match[1]) !== handler.serverPid) {
    // A temp file its writer left, or another server's request: only its age is looked at.
    if (stale(pass, dir.fileMtime(name, "private"))) dir.remove(name)
    return false
  }
  if (pass.memory.taken.has(name)) return false
  const read = dir.read(name, STOP_REQUEST_MAX_BYTES, "private")
  if (!read.ok) {
    if (read.reason === "ENOENT") return false // taken by another instance a moment ago
    if (read.tooLarge && stale(pass, read.tooLarge.mtimeMs)) dir.remove(name)
    else pass.skipped.add("untrusted", name, read.reason)
    return false
  }
  const request = parseStopRequest(read.text)
  if (!request || request.serverPid !== handler.serverPid) {
    if (stale(pass, read.mtimeMs)) dir.remove(name)
    else pass.skipped.add("not a stop request", name)
    return false
  }
  const age = pass.now - request.requestedAt
  if (Math.abs(age) > STOP_REQUEST_STALE_MS || !handler.owns(request.sessionID, request.monitorId)) {
    // Left for the instance that runs it; nobody took it in a minute, so nobody will.
    if (age > STOP_REQUEST_STALE_MS || stale(pass, read.mtimeMs)) dir.remove(name)
    return false
  }
  dir.remove(name)
  pass.memory.taken.add(name)
  handler.stop(request.sessionID, request.monitorId)
  return true
}

/** Runs a pass whenever the folder may have changed, STOP_REQUEST_RESCAN_MS apart; returns the function that stops. */
export function watchStopRequests(
  projectDir: string,
  handler: StopRequestHandler & { scheduler: Scheduler },
  pollMs = 1_000,
): () => void {
  const memory = newScanMemory()
  const pass = () => scanStopRequests(projectDir, handler, memory)
  const watch = new FolderWatch(stopRequestDir(projectDir), pass, pollMs, handler.scheduler, STOP_REQUEST_RESCAN_MS)
  return () => watch.close()
}
