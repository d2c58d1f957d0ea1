import type { StopReason } from "./codec"
import type { MonitorConfig } from "./config"
import type { MonitorFields } from "./errors"
import { compileFilters, type LaunchDeps, spawnRequest, superviseRun } from "./launch"
import type { MonitorInfo, MonitorRun, StopResult } from "./monitor-run"
import type { OutputBatch } from "./pipeline/batcher"
import { lineText, type MonitorLine } from "./pipeline/line"
import type { RingQuery } from "./pipeline/ring-buffer"
import { ReadShare } from "./process/read-pipe"
import { type RestartResult, restartMonitor } from "./restart"
import { ExitedRetention } from "./retention"
import { realScheduler, type Scheduler } from "./scheduler"
import { cancelledStart, MonitorSlots, type Reservation, type StartCancel } from "./slots"
import type { StartRequest } from "./start-request"

export type { MonitorInfo, StopResult } from "./monitor-run"
export type { RestartResult } from "./restart"

/** A monitor as the state record sees it: its info, group leader and last retained lines. */
export type MonitorSnapshot = {
  info: MonitorInfo
  /** The process group leader. */
  pid: number
  /** The leader's start time, read as it started (the proof of its identity later). */
  pidStartTime?: string
  /** sha256 of the token in its environment, for restart recovery's proof (state/recovery-proof.ts). */
  tokenHash?: string
  /** The last retained lines, oldest first. */
  lastLines: readonly { stream: "stdout" | "stderr"; seq: number; text: string }[]
}

export type ManagerDeps = Pick<LaunchDeps, "env" | "shell" | "processTable" | "matchWakeLeft"> & {
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

/** `request`: what started it, the raw command included: kept in memory for monitor_restart, never shown or written. */
type Monitor = { info: MonitorInfo; run: MonitorRun; done: Promise<void>; request: StartRequest }

// The stderr lines an end's fields carry (from the last 50 lines the ring retains).
const STDERR_TAIL_LINES = 5
// Exited monitors kept per session for monitor_list/monitor_output.
const EXITED_RETAINED_PER_SESSION = 10

/** Owns every monitor of the server: start, stop, list, read output, and cleanup. */
export class MonitorManager {
  private readonly monitors = new Map<string, Monitor>()
  private readonly slots: MonitorSlots
  private readonly scheduler: Scheduler
  private readonly retention: ExitedRetention
  private readonly launchDeps: LaunchDeps

  constructor(
    readonly config: MonitorConfig,
    private readonly deps: ManagerDeps,
  ) {
    this.scheduler = deps.scheduler ?? realScheduler
    this.slots = new MonitorSlots({
      cap: config.max_monitors_per_session,
      running: (sessionID) => this.list(sessionID, false),
      inUse: (id) => this.monitors.has(id),
      newId: deps.newId ?? randomMonitorId,
    })
    this.retention = new ExitedRetention(
      {
        maxBytes: config.retained_max_bytes,
        maxCount: config.retained_max_monitors,
        maxAgeMs: config.retained_max_age_ms,
      },
      this.scheduler,
      (id) => this.monitors.delete(id),
    )
    this.launchDeps = {
      config,
      scheduler: this.scheduler,
      env: deps.env,
      shell: deps.shell,
      processTable: deps.processTable,
      matchWakeLeft: deps.matchWakeLeft,
      readShare: new ReadShare(config.output_cpu_share),
      deliver: (batch, info) => this.guard(info.id, () => deps.onBatch(batch, info)),
      onError: (monitorId, error) => this.report(monitorId, error),
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

  /** monitor_restart (restart.ts); undefined when the id is unknown or belongs to another session. */
  async restart(sessionID: string, monitorId: string): Promise<RestartResult | undefined> {
    const old = this.find(sessionID, monitorId)
    if (!old) return undefined
    return restartMonitor({
      old,
      slots: this.slots,
      stop: () => this.end(old, "agent"),
      launch: (slot, request) => this.launch(slot, request),
    })
  }

  /** The request a monitor of this session was started with (memory only), for a restart. */
  requestOf(sessionID: string, monitorId: string): StartRequest | undefined {
    return this.find(sessionID, monitorId)?.request
  }

  /**
   * Starts a request in its slot. A start cancelled meanwhile (its session deleted, a shutdown)
   * spawns nothing or, when its process started at that very moment, stops it again; either way it throws.
   */
  private async launch(slot: Reservation, request: StartRequest): Promise<MonitorInfo> {
    const filters = await compileFilters(request, this.config)
    if (slot.cancelledBy) throw cancelledStart(slot.cancelledBy)
    const child = await spawnRequest(request, this.launchDeps)
    const monitor = this.register(request, superviseRun(slot.id, request, filters, child, this.launchDeps))
    if (slot.cancelledBy) {
      await this.end(monitor, slot.cancelledBy)
      throw cancelledStart(slot.cancelledBy)
    }
    return monitor.info
  }

  private register(request: StartRequest, run: MonitorRun): Monitor {
    const { info } = run
    const monitor: Monitor = { info, run, done: run.done.then(() => this.ended(monitor)), request }
    this.monitors.set(info.id, monitor)
    this.guard(info.id, () => this.deps.onStarted?.(info))
    return monitor
  }

  /** Stops a monitor of this session; undefined when the id is unknown or belongs to another session. */
  async stop(sessionID: string, monitorId: string, by: StopReason): Promise<StopResult | undefined> {
    const monitor = this.find(sessionID, monitorId)
    return monitor && this.end(monitor, by)
  }

  /** Asks the monitor's run to stop; resolves once it has ended and is retained. */
  private async end(monitor: Monitor, by: StopReason): Promise<StopResult> {
    const outcome = await monitor.run.stop(by)
    await monitor.done
    return { info: monitor.info, outcome }
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
    if (!monitor) return undefined
    return { info: monitor.info, lines: monitor.run.pipeline.ring.query(query) }
  }

  /** Stops every monitor of a session and its starts under way, and forgets them (the session is gone). */
  async stopSession(sessionID: string): Promise<void> {
    await this.endAll("session", sessionID)
    for (const monitor of this.monitors.values()) {
      if (monitor.info.sessionID === sessionID) this.forget(monitor.info.id)
    }
  }

  /** Stops everything, the starts under way too, and refuses later starts; resolves when no monitored process is left. */
  async shutdown(): Promise<void> {
    await this.endAll("shutdown")
  }

  /** Stops the monitors (of one session, or all) and cancels the starts under way, which stop what they started. */
  private async endAll(by: StartCancel, sessionID?: string): Promise<void> {
    const ending = [...this.monitors.values()].filter((m) => sessionID === undefined || m.info.sessionID === sessionID)
    await Promise.all([this.slots.cancel(by, sessionID), ...ending.map((m) => this.end(m, by))])
  }

  /**
   * For a signal handler that cannot wait: SIGTERM to every running group right now. Each
   * monitor's watchdog sends SIGKILL after the grace period once this process is gone.
   */
  terminateAllNow(): void {
    for (const monitor of this.monitors.values()) monitor.run.terminateNow()
  }

  /** Every monitor with its group leader's pid and its last retained lines (for the state record). */
  snapshot(lastLines: number): MonitorSnapshot[] {
    return [...this.monitors.values()].map(({ info, run }) => ({
      info,
      pid: run.process.pid,
      pidStartTime: run.process.startTime,
      tokenHash: run.process.tokenHash,
      lastLines: run.pipeline.ring
        .latest(lastLines)
        .map((line) => ({ stream: line.stream, seq: line.seq, text: lineText(line) })),
    }))
  }

  private find(sessionID: string, monitorId: string): Monitor | undefined {
    const monitor = this.monitors.get(monitorId)
    return monitor && monitor.info.sessionID === sessionID ? monitor : undefined
  }

  /** The run ended (status set, terminal batch out): keep it for monitor_list/monitor_output, then tell. */
  private ended(monitor: Monitor): void {
    this.retainExited(monitor)
    this.guard(monitor.info.id, () => this.deps.onEnded?.(monitor.info, this.endFields(monitor)))
  }

  /** How the run ended, as fields: label, cwd, exit code or signal, and the stderr tail. */
  private endFields({ info, run }: Monitor): MonitorFields {
    const { status } = info
    const recent = run.pipeline.ring.query({ sinceSequence: Math.max(0, info.counters.lastSeq - 50), limit: 50 })
    const stderrTail = recent.filter((line) => line.stream === "stderr").map(lineText)
    return {
      label: info.label,
      cwd: info.cwd,
      monitorId: info.id,
      ...(status.kind === "exited" ? { exitCode: status.code } : {}),
      ...("signal" in status && status.signal ? { signal: status.signal } : {}),
      ...(stderrTail.length > 0 ? { stderrTail: stderrTail.slice(-STDERR_TAIL_LINES) } : {}),
    }
  }

  /** Runs a callback of one monitor so that its failure is reported, never thrown at another. */
  private guard(monitorId: string, run: () => void): void {
    try {
      run()
    } catch (error) {
      this.report(monitorId, error)
    }
  }

  private report(monitorId: string, error: unknown): void {
    try {
      this.deps.onError?.(monitorId, error)
    } catch {
      // The error reporter failed too; nothing is left to tell, and nothing may throw from here.
    }
  }

  private retainExited(monitor: Monitor): void {
    const { sessionID, id } = monitor.info
    if (!this.monitors.has(id)) return
    const exited = [...this.monitors.values()].filter(
      (m) => m.info.sessionID === sessionID && m.info.status.kind !== "running",
    )
    for (const old of exited.slice(0, Math.max(0, exited.length - EXITED_RETAINED_PER_SESSION))) {
      this.forget(old.info.id)
    }
    // The server-wide budget (retention.ts) may evict older monitors of any session.
    if (this.monitors.has(id)) this.retention.admit(id, monitor.run.pipeline.ring.compact())
  }

  private forget(id: string): void {
    this.monitors.delete(id)
    this.retention.forget(id)
  }
}

function randomMonitorId(): string {
  return `mon_${Buffer.from(crypto.getRandomValues(new Uint8Array(4))).toString("hex")}`
}
