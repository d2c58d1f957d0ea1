import { randomBytes } from "node:crypto"
import { type FSWatcher, rmSync, watch } from "node:fs"
import { join } from "node:path"
import type { Scheduler, TimerHandle } from "../scheduler"
import { stopRequestDir } from "./format"
import {
  checkPrivateDir,
  ensurePrivateDir,
  listPrivateDir,
  ownFileMtime,
  readPrivateFile,
  SkipLog,
  writePrivateFile,
} from "./safe-file"

/**
 * A person's stop from the TUI (SPEC §11): the TUI drops a small file into
 * `stopRequestDir(projectStateDir(directory))`, addressed to the server process that owns the
 * monitor; that server watches the folder, stops the monitor as the person's stop and removes the
 * file. Files are written atomically (temp name, then rename), so a reader never sees half of one.
 */
export const STOP_REQUEST_FORMAT = "opencode-monitor/stop@1"

export type StopRequest = {
  format: typeof STOP_REQUEST_FORMAT
  /** The pid of the server whose state file lists the monitor. */
  serverPid: number
  sessionID: string
  monitorId: string
  requestedAt: number
}

/** A request nobody took (its server is gone) is removed by any server after this long. */
export const STOP_REQUEST_STALE_MS = 60_000
/** A request is ~150 bytes; a larger file is never read (nor re-read on every scan). */
export const STOP_REQUEST_MAX_BYTES = 4_096

/** Writes a stop request; returns its path. Throws only on a real I/O error (the TUI shows it). */
export function writeStopRequest(
  projectDir: string,
  request: Omit<StopRequest, "format" | "requestedAt">,
  now = Date.now(),
): string {
  const dir = stopRequestDir(projectDir)
  // The server takes requests only from 0600 files in 0700 folders of the user's (safe-file.ts).
  ensurePrivateDir(projectDir)
  ensurePrivateDir(dir)
  const body: StopRequest = { format: STOP_REQUEST_FORMAT, ...request, requestedAt: now }
  const name = `stop-${request.serverPid}-${randomBytes(6).toString("hex")}.json`
  const path = join(dir, name)
  writePrivateFile(path, JSON.stringify(body))
  return path
}

export function parseStopRequest(text: string): StopRequest | undefined {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch {
    return undefined
  }
  if (typeof raw !== "object" || raw === null) return undefined
  const r = raw as Record<string, unknown>
  if (r.format !== STOP_REQUEST_FORMAT) return undefined
  if (!Number.isInteger(r.serverPid) || !Number.isInteger(r.requestedAt)) return undefined
  if (typeof r.sessionID !== "string" || typeof r.monitorId !== "string") return undefined
  return {
    format: STOP_REQUEST_FORMAT,
    serverPid: r.serverPid as number,
    sessionID: r.sessionID,
    monitorId: r.monitorId,
    requestedAt: r.requestedAt as number,
  }
}

export type StopRequestHandler = {
  /** This server's pid: requests addressed to another server are left to it. */
  serverPid: number
  /**
   * Does this plugin instance run that monitor of that session? One server process may hold several
   * instances for one directory (opencode 1.18 creates two), so a request is left for its owner.
   */
  owns: (sessionID: string, monitorId: string) => boolean
  /** Stops a monitor `owns` accepted. */
  stop: (sessionID: string, monitorId: string) => void
  /** The clock of `now` and of the watcher's poll (the poll is on it too, so tests never sleep). */
  scheduler?: Scheduler
  now?: () => number
  onError?: (message: string) => void
}

/** One log line per skipped entry, for the life of a watcher. */
function skipLogOf(handler: StopRequestHandler): SkipLog {
  return new SkipLog((message, extra) => handler.onError?.(`${message}: ${extra.path} (${extra.reason})`))
}

/**
 * One pass over the folder: takes (and removes) the requests for monitors this instance runs.
 * Only a private folder of the user's (not a symlink) is read, and in it only 0600 regular files
 * of the user's within STOP_REQUEST_MAX_BYTES; anything else is skipped with one log line and
 * left alone. Removed are only files of the plugin's own shape: requests taken, and (after
 * STOP_REQUEST_STALE_MS) requests nobody took and unparsable or oversized regular files of the
 * user's. Never throws.
 */
export function scanStopRequests(
  projectDir: string,
  handler: StopRequestHandler,
  skips: SkipLog = skipLogOf(handler),
): number {
  const dir = stopRequestDir(projectDir)
  const parent = checkPrivateDir(projectDir, "private")
  const listed = parent.ok ? listPrivateDir(dir, "private") : parent
  if (!listed.ok) {
    if (listed.reason !== "ENOENT") skips.skip(parent.ok ? dir : projectDir, listed.reason)
    return 0
  }
  const now = handler.now?.() ?? handler.scheduler?.now() ?? Date.now()
  const stale = (mtimeMs: number | undefined) => mtimeMs !== undefined && now - mtimeMs > STOP_REQUEST_STALE_MS
  let stopped = 0
  for (const name of listed.names) {
    const path = join(dir, name)
    try {
      if (!name.endsWith(".json")) {
        // A temp file left by a writer that died mid-write.
        if (name.endsWith(".tmp") && stale(ownFileMtime(path))) rmSync(path, { force: true })
        continue
      }
      const read = readPrivateFile(path, STOP_REQUEST_MAX_BYTES, "private")
      if (!read.ok) {
        if (read.reason === "ENOENT") continue // taken by another instance a moment ago
        if (read.tooLarge && stale(read.tooLarge.mtimeMs)) rmSync(path, { force: true })
        else skips.skip(path, read.reason)
        continue
      }
      const request = parseStopRequest(read.text)
      if (!request) {
        // Ignored, not deleted: removed only once it is old (a writer may still be finishing it).
        if (stale(read.mtimeMs)) rmSync(path, { force: true })
        else skips.skip(path, "not a stop request")
        continue
      }
      if (request.serverPid !== handler.serverPid || !handler.owns(request.sessionID, request.monitorId)) {
        // Not ours: another server or instance takes it; nobody did in a minute, so nobody will.
        if (stale(read.mtimeMs) || now - request.requestedAt > STOP_REQUEST_STALE_MS) rmSync(path, { force: true })
        continue
      }
      rmSync(path, { force: true })
      handler.stop(request.sessionID, request.monitorId)
      stopped += 1
    } catch (error) {
      handler.onError?.(`stop request ${name}: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
  return stopped
}

/**
 * Watches the folder (fs.watch once it exists, with a poll that also finds it when the TUI creates
 * it first) and scans on every change. Creates nothing. Returns the function that stops watching.
 */
export function watchStopRequests(
  projectDir: string,
  handler: StopRequestHandler & { scheduler: Scheduler },
  pollMs = 1_000,
): () => void {
  const { scheduler } = handler
  const dir = stopRequestDir(projectDir)
  let watcher: FSWatcher | undefined
  let closed = false
  const skips = skipLogOf(handler)
  let timer: TimerHandle | undefined
  const poll = () => {
    timer = scheduler.setTimeout(poll, pollMs)
    scan()
  }
  const scan = () => {
    if (closed) return
    if (!watcher) {
      try {
        watcher = watch(dir, scan)
        watcher.on("error", () => {
          watcher?.close()
          watcher = undefined
        })
      } catch {
        // Not there yet: the poll looks again.
      }
    }
    scanStopRequests(projectDir, handler, skips)
  }
  poll()
  return () => {
    closed = true
    if (timer) scheduler.clearTimeout(timer)
    watcher?.close()
  }
}
