import { randomBytes } from "node:crypto"
import { join } from "node:path"
import { errorText } from "../errors"
import type { Logger } from "../log"
import type { ProcessIdentity } from "../process/process-table"
import type { Scheduler, TimerHandle } from "../scheduler"
import {
  type MonitorStateEntry,
  projectStateDir,
  runningFirst,
  type ServerStateFile,
  STATE_FORMAT,
  STATE_MAX_MONITORS,
  serverStateFileName,
} from "./format"
import { PrivateDir, type Refused } from "./safe-file"

export type StateWriterOptions = {
  /** The project directory of this plugin instance (one state folder per directory). */
  directory: string
  /** Every monitor of this instance, as its record holds it (the manager's snapshot). */
  source: () => MonitorStateEntry[]
  scheduler: Scheduler
  log: Pick<Logger, "warn">
  env?: Record<string, string | undefined>
  server: ProcessIdentity
  /** Tells this plugin instance's file from another instance's in the same server process (default: random). */
  instance?: string
  /** The monitor's exit notice still waits for its session (delivery has not sent it yet). */
  wakePending?: (monitor: { id: string; sessionID: string }) => boolean
}

/** At most ~4 writes a second, whatever the output rate. */
export const STATE_WRITE_MIN_INTERVAL_MS = 250
/** While a monitor runs its counters and last lines are looked at this often (the TUI wants ≤ 1 s). */
export const STATE_POLL_MS = 500
/** An ended monitor stays in the record this long, for the TUI's "recently exited" list. */
export const STATE_ENDED_RETAIN_MS = 120_000

/** This server's record of its monitors: atomic, throttled, bounded, gone on a clean dispose; writing never throws. */
export class MonitorStateWriter {
  readonly path: string
  private readonly dir: string
  private readonly name: string
  private readonly entries = new Map<string, MonitorStateEntry>()
  private timer: TimerHandle | undefined
  private timerAt = 0
  private lastWriteAt = Number.NEGATIVE_INFINITY
  private lastBody: string | undefined
  private failing = false
  private disposed = false

  constructor(private readonly options: StateWriterOptions) {
    this.dir = projectStateDir(options.directory, options.env)
    const instance = options.instance ?? randomBytes(4).toString("hex")
    this.name = serverStateFileName(options.server.pid, options.server.pidStartTime, instance)
    this.path = join(this.dir, this.name)
  }

  /** Something changed (start, exit): the record is rewritten within STATE_WRITE_MIN_INTERVAL_MS. */
  changed(): void {
    if (this.disposed) return
    const now = this.options.scheduler.now()
    this.arm(Math.max(0, this.lastWriteAt + STATE_WRITE_MIN_INTERVAL_MS - now))
  }

  /** Clean end of this server's plugin instance: nothing of it is left to recover. */
  dispose(): void {
    if (this.disposed) return
    this.disposed = true
    if (this.timer !== undefined) this.options.scheduler.clearTimeout(this.timer)
    this.remove()
  }

  /** The record as it would be written now (also what tests read). */
  snapshot(): ServerStateFile {
    const now = this.options.scheduler.now()
    this.collect(now)
    // Within the bound: running monitors and undelivered exits first, then the most recently ended ones.
    const owed = (e: MonitorStateEntry) => e.status.kind === "running" || e.wakePending === true
    return {
      format: STATE_FORMAT,
      server: { ...this.options.server, directory: this.options.directory, updatedAt: now },
      monitors: runningFirst([...this.entries.values()], owed).slice(0, STATE_MAX_MONITORS),
    }
  }

  private arm(delayMs: number): void {
    const at = this.options.scheduler.now() + delayMs
    if (this.timer !== undefined) {
      if (this.timerAt <= at) return
      this.options.scheduler.clearTimeout(this.timer)
    }
    this.timerAt = at
    this.timer = this.options.scheduler.setTimeout(() => {
      this.timer = undefined
      this.flush()
    }, delayMs)
  }

  private flush(): void {
    if (this.disposed) return
    const file = this.snapshot()
    const body = JSON.stringify(file.monitors)
    if (body !== this.lastBody) {
      if (file.monitors.length === 0) this.remove()
      else this.inFolder("write", PrivateDir.ensure, (dir) => dir.write(this.name, `${JSON.stringify(file)}\n`))
      this.lastBody = body
      this.lastWriteAt = file.server.updatedAt
    }
    // Running monitors print, and exit notices get sent: look again soon. Ended ones only expire.
    if (file.monitors.some((m) => m.status.kind === "running" || m.wakePending)) this.arm(STATE_POLL_MS)
    else {
      const expiries = file.monitors.map((m) => (m.endedAt ?? 0) + STATE_ENDED_RETAIN_MS - file.server.updatedAt)
      if (expiries.length > 0) this.arm(Math.max(STATE_WRITE_MIN_INTERVAL_MS, Math.min(...expiries)))
    }
  }

  private collect(now: number): void {
    for (const entry of this.options.source()) {
      const known = this.entries.get(entry.id)
      // Taken once, while the leader surely runs; an ended leader's pid may already be reused.
      const pidStartTime = known ? known.pidStartTime : entry.status.kind === "running" ? entry.pidStartTime : undefined
      this.entries.set(entry.id, { ...entry, pidStartTime })
    }
    for (const [id, entry] of this.entries) {
      if (entry.status.kind !== "running" && this.options.wakePending?.(entry)) entry.wakePending = true
      else delete entry.wakePending
      // An exit notice still on its way is kept whatever its age: a restart must deliver it.
      if (entry.endedAt !== undefined && !entry.wakePending && now - entry.endedAt >= STATE_ENDED_RETAIN_MS) {
        this.entries.delete(id)
      }
    }
  }

  private remove(): void {
    this.inFolder("remove", PrivateDir.open, (dir) => dir.removeOwn(this.name))
  }

  /** Runs `use` in the state folder; a failure is one log line per streak of failures, not one per write. */
  private inFolder(what: string, open: (path: string) => PrivateDir | Refused, use: (dir: PrivateDir) => void): void {
    try {
      const dir = open(this.dir)
      if (!(dir instanceof PrivateDir)) return // no folder of ours: no record in it either
      try {
        use(dir)
      } finally {
        dir.close()
      }
      this.failing = false
    } catch (error) {
      if (this.failing) return
      this.failing = true
      const message = `could not ${what} the monitor state file; the TUI and restart recovery will not see it`
      this.options.log.warn(message, { path: this.path, error: errorText(error) })
    }
  }
}
