import { randomBytes } from "node:crypto"
import { formatEnding, formatStatus, type StopReason } from "./codec"
import type { MonitorConfig } from "./config"
import { attempt, type MonitorFields, MonitorError } from "./errors"
import { type Filters, type MonitorInfo, MonitorRun, type RunDeps, type StopResult } from "./monitor-run"
import type { OutputBatch } from "./pipeline/batcher"
import { compileLineFilter, PatternError } from "./pipeline/filter"
import { lineText, type MonitorLine } from "./pipeline/line"
import type { RingQuery } from "./pipeline/ring-buffer"
import { type MonitoredProcess, SpawnError, spawnInGroup } from "./process/process-group"
import type { ProcessTable } from "./process/process-table"
import { findMissingProgram } from "./process/program-check"
import { ReadShare } from "./process/read-pipe"
import { ExitedRetention } from "./retention"
import { realScheduler, type Scheduler } from "./scheduler"
import { cancelledStart, cancelReason, MonitorSlots, type Reservation, type StartCancel } from "./slots"
import type { StartRequest } from "./start-request"
import { type MonitorStateEntry, STATE_LAST_LINES, stateEntry } from "./state/format"

export type { MonitorInfo, StopResult } from "./monitor-run"

export type ManagerDeps = Pick<RunDeps, "matchWakeLeft"> & {
  env?: NodeJS.ProcessEnv
  /** The shell commands run in (process/shell.ts resolves it); `sh` when not given. */
  shell?: () => string
  /** The process table monitors are tracked with (process/process-table.ts); this server's when not given. */
  processTable?: ProcessTable
  onBatch: (batch: OutputBatch, monitor: MonitorInfo) => void
  /** The run ended; `end` says how, as fields (exit code or signal, the last stderr lines). */
  onEnded?: (monitor: MonitorInfo, end: MonitorFields) => void
  onStarted?: (monitor: MonitorInfo) => void
  /** A callback or the supervision of one monitor threw; the other monitors are unaffected. */
  onError?: (monitorId: string, error: unknown) => void
  scheduler?: Scheduler
  /** Makes a fresh monitor id; injected so a test can force a collision. */
  newId?: () => string
}

// The stderr lines an end's fields carry (from its last 50 lines), and the exited monitors kept per session.
const STDERR_TAIL_LINES = 5
const EXITED_RETAINED_PER_SESSION = 10

/** Owns every monitor of the server: start, stop, list, read output, and cleanup. */
export class MonitorManager {
  private readonly monitors = new Map<string, MonitorRun>()
  private readonly slots: MonitorSlots
  private readonly scheduler: Scheduler
  private readonly retention: ExitedRetention
  private readonly runDeps: RunDeps

  constructor(
    readonly config: MonitorConfig,
    private readonly deps: ManagerDeps,
  ) {
    this.scheduler = deps.scheduler ?? realScheduler
    this.slots = new MonitorSlots({
      cap: config.max_monitors_per_session,
      running: (sessionID) => this.list(sessionID, false),
      inUse: (id) => this.monitors.has(id),
      newId: deps.newId ?? (() => `mon_${randomBytes(4).toString("hex")}`),
    })
    this.retention = new ExitedRetention(config, this.scheduler, (id) => this.monitors.delete(id))
    this.runDeps = {
      config,
      scheduler: this.scheduler,
      matchWakeLeft: deps.matchWakeLeft,
      readShare: new ReadShare(config.output_cpu_share),
      deliver: (batch, info) => this.guard(info.id, () => deps.onBatch(batch, info)),
      onError: (monitorId, error) => this.report(monitorId, error),
      ended: (run) => this.ended(run),
    }
  }

  /** Exited monitors kept across the server, and the estimated bytes of their output. */
  get retained(): { count: number; bytes: number } {
    return this.retention.totals
  }

  async start(request: StartRequest): Promise<MonitorInfo> {
    const slot = this.slots.take(request.sessionID)
    try {
      return await this.launch(slot, request)
    } finally {
      this.slots.release(slot)
    }
  }

  /** Stops the old monitor, waits until its processes are gone (so their port is free), then starts its request again. */
  async restart(
    sessionID: string,
    monitorId: string,
  ): Promise<{ previous: StopResult; started: MonitorInfo } | undefined> {
    const old = this.find(sessionID, monitorId)
    if (!old) return undefined
    const slot = this.slots.take(sessionID, { of: monitorId, running: old.info.status.kind === "running" })
    try {
      const previous = await old.stop("agent")
      const started = await this.launch(slot, old.request).catch((error) => {
        throw error instanceof MonitorError ? restartFailed(previous, slot, error) : error
      })
      return { previous, started }
    } finally {
      this.slots.release(slot)
    }
  }

  /** A start cancelled meanwhile (session deleted, shutdown) throws, and stops what it spawned at that moment. */
  private async launch(slot: Reservation, request: StartRequest): Promise<MonitorInfo> {
    const filters = await compileFilters(request, this.config)
    if (slot.cancelledBy) throw cancelledStart(slot.cancelledBy)
    const child = await this.spawn(request)
    const run = new MonitorRun(slot.id, request, filters, child, this.runDeps)
    this.monitors.set(run.info.id, run)
    this.guard(run.info.id, () => this.deps.onStarted?.(run.info))
    if (slot.cancelledBy) {
      await run.stop(slot.cancelledBy)
      throw cancelledStart(slot.cancelledBy)
    }
    return run.info
  }

  /** The start's command spawned in its own process group; spawn_failed when it cannot start. */
  private async spawn(request: StartRequest): Promise<MonitoredProcess> {
    const env = this.deps.env ?? process.env
    const shell = this.deps.shell?.() ?? "sh"
    const failed = (why: string) =>
      new MonitorError("spawn_failed", `Cannot start the command (${request.label}): ${why}.`, {
        label: request.label,
        cwd: request.directory,
      })
    const missing = findMissingProgram(request.program, request.command, shell, request.directory, env.PATH)
    if (missing) throw failed(missing)
    return spawnInGroup({
      command: request.command,
      shell,
      cwd: request.directory,
      killGraceMs: this.config.kill_grace_ms,
      env,
      table: this.deps.processTable,
      unbufferedRuntimes: this.config.unbuffered_runtimes,
    }).catch((error) => {
      throw error instanceof SpawnError ? failed(error.message) : error
    })
  }

  /** Stops a monitor of this session; undefined when the id is unknown or belongs to another session. */
  async stop(sessionID: string, monitorId: string, by: StopReason): Promise<StopResult | undefined> {
    return this.find(sessionID, monitorId)?.stop(by)
  }

  get(sessionID: string, monitorId: string): MonitorInfo | undefined {
    return this.find(sessionID, monitorId)?.info
  }

  list(sessionID: string, includeExited: boolean): MonitorInfo[] {
    return [...this.monitors.values()]
      .filter((m) => m.info.sessionID === sessionID && (includeExited || m.info.status.kind === "running"))
      .map((m) => m.info)
  }

  output(
    sessionID: string,
    monitorId: string,
    query: RingQuery,
  ): { info: MonitorInfo; lines: MonitorLine[] } | undefined {
    const monitor = this.find(sessionID, monitorId)
    return monitor && { info: monitor.info, lines: monitor.pipeline.ring.query(query) }
  }

  /** Stops every monitor of a session and its starts under way, and forgets them (the session is gone). */
  async stopSession(sessionID: string): Promise<void> {
    await this.endAll("session", sessionID)
    for (const { id } of this.list(sessionID, true)) this.forget(id)
  }

  /** Stops everything, the starts under way too, and refuses later starts; resolves when no monitored process is left. */
  async shutdown(): Promise<void> {
    await this.endAll("shutdown")
  }

  /** Stops the monitors (of one session, or all) and cancels the starts under way, which stop what they started. */
  private async endAll(by: StartCancel, sessionID?: string): Promise<void> {
    const ending = [...this.monitors.values()].filter((m) => sessionID === undefined || m.info.sessionID === sessionID)
    await Promise.all([this.slots.cancel(by, sessionID), ...ending.map((m) => m.stop(by))])
  }

  /** For a signal handler that cannot wait: SIGTERM to every group now; each watchdog SIGKILLs after the grace. */
  terminateAllNow(): void {
    for (const run of this.monitors.values()) run.terminateNow()
  }

  /** Every monitor as the state record holds it (state/format.ts), with its last retained lines. */
  snapshot(): MonitorStateEntry[] {
    return [...this.monitors.values()].map(({ info, process, pipeline }) =>
      stateEntry(
        info,
        process,
        pipeline.ring.latest(STATE_LAST_LINES).map((line) => ({ ...line, text: lineText(line) })),
      ),
    )
  }

  /** A monitor of this session: its info and the request it was started with (memory only, for a restart). */
  find(sessionID: string, monitorId: string): MonitorRun | undefined {
    const monitor = this.monitors.get(monitorId)
    return monitor && monitor.info.sessionID === sessionID ? monitor : undefined
  }

  /** The run ended (status set, terminal batch out): keep it for monitor_list/monitor_output, then tell. */
  private ended(run: MonitorRun): void {
    this.retainExited(run)
    this.guard(run.info.id, () => this.deps.onEnded?.(run.info, this.endFields(run)))
  }

  private endFields({ info, pipeline }: MonitorRun): MonitorFields {
    const { status } = info
    const recent = (line: MonitorLine) => line.stream === "stderr" && line.seq > info.counters.lastSeq - 50
    const stderrTail = pipeline.ring.latest(STDERR_TAIL_LINES, recent).map(lineText)
    return {
      label: info.label,
      cwd: info.cwd,
      monitorId: info.id,
      ...(status.kind === "exited" ? { exitCode: status.code } : {}),
      ...("signal" in status && status.signal ? { signal: status.signal } : {}),
      ...(stderrTail.length > 0 ? { stderrTail } : {}),
    }
  }

  /** A callback of one monitor: its failure is reported, never thrown at another. */
  private guard(monitorId: string, run: () => void): void {
    try {
      run()
    } catch (error) {
      this.report(monitorId, error)
    }
  }

  private report(monitorId: string, error: unknown): void {
    // The error reporter may fail too; nothing is left to tell then, and nothing may throw from here.
    attempt(() => this.deps.onError?.(monitorId, error))
  }

  private retainExited(run: MonitorRun): void {
    const { sessionID, id } = run.info
    if (!this.monitors.has(id)) return
    const exited = this.list(sessionID, true).filter((m) => m.status.kind !== "running")
    for (const old of exited.slice(0, Math.max(0, exited.length - EXITED_RETAINED_PER_SESSION))) this.forget(old.id)
    // The server-wide budget (retention.ts) may evict older monitors of any session.
    if (this.monitors.has(id)) this.retention.admit(id, run.pipeline.ring.compact())
  }

  private forget(id: string): void {
    this.monitors.delete(id)
    this.retention.forget(id)
  }
}

/** The start's match_pattern and wake_pattern, compiled; invalid_pattern when one is bad. */
async function compileFilters(request: StartRequest, config: MonitorConfig): Promise<Filters> {
  try {
    return {
      match: await compileLineFilter(request.matchPattern, config.pattern_max_length),
      wake: await compileLineFilter(request.wakePattern, config.pattern_max_length, "wake_pattern"),
    }
  } catch (error) {
    if (error instanceof PatternError) throw new MonitorError("invalid_pattern", error.message)
    throw error
  }
}

/** A restart whose new start failed: the agent learns how the old monitor ended, and why nothing replaced it. */
function restartFailed(previous: StopResult, slot: Reservation, error: MonitorError): MonitorError {
  const { info } = previous
  const old = `The old monitor ${info.id} (${info.label}) ${howItEnded(previous)}, with status ${formatStatus(info.status)}`
  const message = slot.cancelledBy
    ? `${old}, but the new one was not started: ${cancelReason(slot.cancelledBy)}. Nothing runs in its place.`
    : `${old}, but the new one did not start: ${error.message} Nothing runs in its place; start it again with monitor_start once that is fixed.`
  return new MonitorError(error.code, message, error.fields)
}

function howItEnded({ outcome, info }: StopResult): string {
  if (outcome === "stopped") return "was stopped"
  if (outcome === "ended" || !info.ending) return "had already ended"
  return `was already ending (${formatEnding(info.ending)})`
}
