import { formatStatus, type StopReason } from "./codec"
import type { MonitorConfig } from "./config"
import { MonitorError, type MonitorFields } from "./errors"
import { type MonitorInfo, MonitorRun } from "./monitor-run"
import type { OutputBatch } from "./pipeline/batcher"
import { compileLineFilter, PatternError } from "./pipeline/filter"
import type { MonitorLine } from "./pipeline/line"
import { createMonitorPipeline } from "./pipeline/pipeline"
import type { RingQuery } from "./pipeline/ring-buffer"
import { type MonitoredProcess, SpawnError, spawnInGroup } from "./process/process-group"
import { findMissingProgram } from "./process/program-check"
import type { ProcessTable } from "./process/process-table"
import { ExitedRetention } from "./retention"
import { realScheduler, type Scheduler } from "./scheduler"
import type { StartRequest } from "./start-request"

export type { MonitorInfo } from "./monitor-run"

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

export type ManagerDeps = {
  onBatch: (batch: OutputBatch, monitor: MonitorInfo) => void
  /** The run ended; `end` says how, as fields (exit code or signal, the last stderr lines). */
  onEnded?: (monitor: MonitorInfo, end: MonitorFields) => void
  onStarted?: (monitor: MonitorInfo) => void
  /** A callback or the supervision of one monitor threw; the other monitors are unaffected. */
  onError?: (monitorId: string, error: unknown) => void
  scheduler?: Scheduler
  env?: NodeJS.ProcessEnv
  /** Makes a fresh monitor id; injected so a test can force a collision. */
  newId?: () => string
  /** The shell commands run in (process/shell.ts resolves it); `sh` when not given. */
  shell?: () => string
  /** The process table monitors are tracked with (process/process-table.ts); this server's when not given. */
  processTable?: ProcessTable
  /** The monitor may still cause a match wake (`wake_limit` not used up); past it a match is a plain line. */
  matchWakeLeft?: (monitorId: string, wakeLimit: number) => boolean
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
  /** Ids being started, with their session: they count against the cap and cannot be reused. */
  private readonly reserved = new Map<string, string>()
  private readonly scheduler: Scheduler
  private readonly retention: ExitedRetention

  constructor(
    readonly config: MonitorConfig,
    private readonly deps: ManagerDeps,
  ) {
    this.scheduler = deps.scheduler ?? realScheduler
    this.retention = new ExitedRetention(
      {
        maxBytes: config.retained_max_bytes,
        maxCount: config.retained_max_monitors,
        maxAgeMs: config.retained_max_age_ms,
      },
      this.scheduler,
      (id) => this.monitors.delete(id),
    )
  }

  /** Exited monitors kept across the server, and the estimated bytes of their output. */
  get retained(): { count: number; bytes: number } {
    return this.retention.totals
  }

  async start(request: StartRequest): Promise<MonitorInfo> {
    // The slot and the id are taken before the first await, so concurrent starts in one step
    // cannot all pass the cap or share an id.
    const id = this.reserve(request.sessionID)
    try {
      return await this.startReserved(id, request)
    } finally {
      this.reserved.delete(id)
    }
  }

  /**
   * monitor_restart (SPEC §15): stops the monitor (a stop the agent asked for) and waits until its
   * group and tracked escapees are gone, then starts the same request as a new monitor. A running
   * monitor hands its slot over (the new id is reserved first, beyond the cap, so no other start
   * can take the slot meanwhile); an ended one needs a free slot like any start.
   */
  async restart(
    sessionID: string,
    monitorId: string,
  ): Promise<{ previous: MonitorInfo; started: MonitorInfo } | undefined> {
    const old = this.find(sessionID, monitorId)
    if (!old) return undefined
    const wasRunning = old.info.status.kind === "running"
    const id = this.reserve(sessionID, wasRunning)
    try {
      const previous = (await this.stop(sessionID, monitorId, "agent")) ?? old.info
      try {
        return { previous, started: await this.startReserved(id, old.request) }
      } catch (error) {
        throw error instanceof MonitorError ? restartFailed(previous, wasRunning, error) : error
      }
    } finally {
      this.reserved.delete(id)
    }
  }

  /** The request a monitor of this session was started with (memory only), for a restart. */
  requestOf(sessionID: string, monitorId: string): StartRequest | undefined {
    return this.find(sessionID, monitorId)?.request
  }

  /** `replacing`: a restart takes over the slot of a running monitor, so the cap is not checked. */
  private reserve(sessionID: string, replacing = false): string {
    const running = this.running(sessionID)
    const starting = [...this.reserved.values()].filter((s) => s === sessionID).length
    if (!replacing && running.length + starting >= this.config.max_monitors_per_session) {
      const names = running.map((m) => `${m.info.id} (${m.info.label})`)
      if (starting > 0) names.push(`${starting} still starting`)
      throw new MonitorError(
        "cap_reached",
        `This session already runs ${running.length + starting} monitors (max_monitors_per_session=${this.config.max_monitors_per_session}). ` +
          `Stop one first with monitor_stop: ${names.join(", ")}.`,
      )
    }
    const newId = this.deps.newId ?? randomMonitorId
    for (let tries = 0; tries < 100; tries++) {
      const id = newId()
      if (this.monitors.has(id) || this.reserved.has(id)) continue
      this.reserved.set(id, sessionID)
      return id
    }
    throw new MonitorError("spawn_failed", "Could not find a free monitor id after 100 tries; try again.")
  }

  private async startReserved(id: string, request: StartRequest): Promise<MonitorInfo> {
    const filters = await this.compileFilters(request)
    const child = await this.spawn(request)
    const pipeline = createMonitorPipeline({
      monitorId: id,
      config: this.config,
      filter: filters.match,
      wakeFilter: filters.wake,
      silenceMs: request.silenceMs,
      matchWakeLeft: () => this.deps.matchWakeLeft?.(id, request.wakeLimit) ?? true,
      scheduler: this.scheduler,
      // Batches only flow once the process runs, after `run` exists.
      onBatch: (batch) => {
        if (run.delivering) this.guard(id, () => this.deps.onBatch(batch, info))
      },
    })
    const info: MonitorInfo = {
      id,
      sessionID: request.sessionID,
      label: request.label,
      cwd: request.directory,
      pattern: request.matchPattern,
      wakePattern: filters.wake ? request.wakePattern : undefined,
      wakeLimit: filters.wake ? request.wakeLimit : 0,
      silenceMs: request.silenceMs,
      startedAt: this.scheduler.now(),
      endedAt: undefined,
      timeoutMs: request.timeoutMs,
      status: { kind: "running" },
      ending: undefined,
      counters: pipeline.ring.counters,
    }
    const run = new MonitorRun(info, pipeline, child, {
      scheduler: this.scheduler,
      killGraceMs: this.config.kill_grace_ms,
      onError: (error) => this.report(id, error),
    })
    const monitor: Monitor = { info, run, done: run.done.then(() => this.ended(monitor)), request }
    this.monitors.set(id, monitor)
    this.guard(id, () => this.deps.onStarted?.(info))
    return info
  }

  private async compileFilters(request: StartRequest) {
    try {
      return {
        match: await compileLineFilter(request.matchPattern, this.config.pattern_max_length),
        wake: await compileLineFilter(request.wakePattern, this.config.pattern_max_length, "wake_pattern"),
      }
    } catch (error) {
      if (error instanceof PatternError) throw new MonitorError("invalid_pattern", error.message)
      throw error
    }
  }

  private async spawn(request: StartRequest): Promise<MonitoredProcess> {
    const env = this.deps.env ?? process.env
    const shell = this.deps.shell?.() ?? "sh"
    const missing = findMissingProgram(request.program, request.command, shell, request.directory, env.PATH)
    const fields = { label: request.label, cwd: request.directory }
    if (missing)
      throw new MonitorError("spawn_failed", `Cannot start the command (${request.label}): ${missing}.`, fields)
    try {
      return await spawnInGroup({
        command: request.command,
        shell,
        cwd: request.directory,
        killGraceMs: this.config.kill_grace_ms,
        env,
        table: this.deps.processTable,
      })
    } catch (error) {
      if (error instanceof SpawnError)
        throw new MonitorError("spawn_failed", `Cannot start the command (${request.label}): ${error.message}.`, fields)
      throw error
    }
  }

  /** Stops a monitor of this session; undefined when the id is unknown or belongs to another session. */
  async stop(sessionID: string, monitorId: string, reason: StopReason): Promise<MonitorInfo | undefined> {
    const monitor = this.find(sessionID, monitorId)
    if (!monitor) return undefined
    await monitor.run.stop(reason)
    await monitor.done
    return monitor.info
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

  /** Stops every monitor of a session and forgets them (the session is gone). */
  async stopSession(sessionID: string): Promise<void> {
    const ids = [...this.monitors.values()].filter((m) => m.info.sessionID === sessionID).map((m) => m.info.id)
    await Promise.all(ids.map((id) => this.stop(sessionID, id, "session")))
    for (const id of ids) this.forget(id)
  }

  /** Stops everything; resolves when no monitored process is left. */
  async shutdown(): Promise<void> {
    await Promise.all([...this.monitors.values()].map((m) => this.stop(m.info.sessionID, m.info.id, "shutdown")))
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
      lastLines: run.pipeline.ring.query({
        sinceSequence: Math.max(0, info.counters.lastSeq - lastLines),
        limit: lastLines,
      }),
    }))
  }

  private running(sessionID: string): Monitor[] {
    return [...this.monitors.values()].filter((m) => m.info.sessionID === sessionID && m.info.status.kind === "running")
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
    const stderrTail = recent.filter((line) => line.stream === "stderr").map((line) => line.text)
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

/** A restart whose new start failed: the agent learns that the old monitor no longer runs, and why. */
function restartFailed(previous: MonitorInfo, wasRunning: boolean, error: MonitorError): MonitorError {
  const old = `The old monitor ${previous.id} (${previous.label}) ${wasRunning ? "was stopped" : "had already ended"}`
  return new MonitorError(
    error.code,
    `${old}, with status ${formatStatus(previous.status)}, but the new one did not start: ${error.message} ` +
      "Nothing runs in its place; start it again with monitor_start once that is fixed.",
    error.fields,
  )
}
