import type { MonitorConfig } from "./config"
import { sanitizeLabel } from "./delivery/envelope"
import { MonitorError } from "./errors"
import type { OutputBatch } from "./pipeline/batcher"
import { compileLineFilter, PatternError } from "./pipeline/filter"
import type { MonitorLine } from "./pipeline/line"
import { createMonitorPipeline, type MonitorPipeline } from "./pipeline/pipeline"
import type { RingCounters, RingQuery } from "./pipeline/ring-buffer"
import { type MonitoredProcess, type ProcessExit, SpawnError, spawnInGroup } from "./process/process-group"
import { parseSimpleCommands } from "./permission/bash-parser"
import { findMissingProgram } from "./process/program-check"
import { programName, programWord } from "./process/program-word"
import type { ProcessTable } from "./process/process-table"
import { readPipe } from "./process/read-pipe"
import { ExitedRetention } from "./retention"
import { realScheduler, type Scheduler } from "./scheduler"
import type { MonitorStatus } from "./status"

/** "person": stopped from the TUI; its terminal batch is still delivered, as an observation. */
export type StopReason = "agent" | "person" | "session" | "shutdown"

/** What callers may see of a monitor: never the raw command. */
export type MonitorInfo = {
  id: string
  sessionID: string
  label: string
  pattern: string | undefined
  /** `wake_pattern` and how many match wakes it may cause (`wake_limit`); SPEC §10. */
  wakePattern: string | undefined
  wakeLimit: number
  startedAt: number
  endedAt: number | undefined
  timeoutMs: number
  status: MonitorStatus
  stoppedBy: StopReason | undefined
  counters: RingCounters
}

/** A monitor as the state record sees it: its info, group leader and last retained lines. */
export type MonitorSnapshot = {
  info: MonitorInfo
  /** The process group leader. */
  pid: number
  /** The last retained lines, oldest first. */
  lastLines: readonly { stream: "stdout" | "stderr"; seq: number; text: string }[]
}

export type StartRequest = {
  sessionID: string
  directory: string
  command: string
  label?: string
  matchPattern?: string
  wakePattern?: string
  wakeLimit?: number
  timeoutMs?: number
}

export type ManagerDeps = {
  onBatch: (batch: OutputBatch, monitor: MonitorInfo) => void
  onEnded?: (monitor: MonitorInfo) => void
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
}

type Monitor = {
  info: MonitorInfo
  pipeline: MonitorPipeline
  process: MonitoredProcess
  stopSignal: Promise<NodeJS.Signals | null> | undefined
  timedOut: boolean
  /** The group leader has exited: a stop from now on stops nothing, the exit stands. */
  leaderExited: boolean
  /** A stop was asked for: nothing more of this monitor is delivered. */
  silenced: boolean
  /** The pipes had to be closed by the monitor: something it could not find held them open. */
  pipesHeld: boolean
  done: Promise<void>
}

// How long the pipes may stay open after the leader exited (a grandchild holding them) before
// the rest of the group is terminated.
const DRAIN_WAIT_MS = 500
/** The most match wakes one monitor may ask for (`wake_limit`). */
export const WAKE_LIMIT_MAX = 20
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
    private readonly config: MonitorConfig,
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
    const command = request.command.trim()
    if (command === "") throw new MonitorError("invalid_argument", "command is empty; pass the shell command to run.")
    // The slot and the id are taken before the first await, so concurrent starts in one step
    // cannot all pass the cap or share an id.
    const id = this.reserve(request.sessionID)
    try {
      return await this.startReserved(id, request, command)
    } finally {
      this.reserved.delete(id)
    }
  }

  private reserve(sessionID: string): string {
    const running = this.running(sessionID)
    const starting = [...this.reserved.values()].filter((s) => s === sessionID).length
    if (running.length + starting >= this.config.max_monitors_per_session) {
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

  private async startReserved(id: string, request: StartRequest, command: string): Promise<MonitorInfo> {
    const timeoutMs = request.timeoutMs ?? this.config.max_runtime_ms
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > this.config.max_runtime_ms) {
      throw new MonitorError(
        "invalid_argument",
        `timeout_ms must be an integer from 1 to ${this.config.max_runtime_ms} (max_runtime_ms); got ${request.timeoutMs}.`,
      )
    }
    const wakeLimit = request.wakeLimit ?? 1
    if (!Number.isInteger(wakeLimit) || wakeLimit < 1 || wakeLimit > WAKE_LIMIT_MAX) {
      throw new MonitorError(
        "invalid_argument",
        `wake_limit must be an integer from 1 to ${WAKE_LIMIT_MAX}; got ${request.wakeLimit}.`,
      )
    }
    if (request.wakeLimit !== undefined && !request.wakePattern) {
      throw new MonitorError(
        "invalid_argument",
        "wake_limit needs a wake_pattern: pass the regex of the line that should wake you.",
      )
    }
    let filter: Awaited<ReturnType<typeof compileLineFilter>>
    let wakeFilter: Awaited<ReturnType<typeof compileLineFilter>>
    try {
      filter = await compileLineFilter(request.matchPattern, this.config.pattern_max_length)
      wakeFilter = await compileLineFilter(request.wakePattern, this.config.pattern_max_length, "wake_pattern")
    } catch (error) {
      if (error instanceof PatternError) throw new MonitorError("invalid_pattern", error.message)
      throw error
    }
    const env = this.deps.env ?? process.env
    const shell = this.deps.shell?.() ?? "sh"
    const [first] = await parseSimpleCommands(command)
    const missing = findMissingProgram(first && programWord(first.argv), shell, request.directory, env.PATH)
    if (missing) throw new MonitorError("spawn_failed", `Cannot start the command: ${missing}.`)

    let child: MonitoredProcess
    try {
      child = await spawnInGroup({
        command,
        shell,
        cwd: request.directory,
        killGraceMs: this.config.kill_grace_ms,
        env,
        table: this.deps.processTable,
      })
    } catch (error) {
      if (error instanceof SpawnError)
        throw new MonitorError("spawn_failed", `Cannot start the command: ${error.message}.`)
      throw error
    }

    const pipeline = createMonitorPipeline({
      monitorId: id,
      config: this.config,
      filter,
      wakeFilter,
      scheduler: this.scheduler,
      // Batches only flow once the process runs, after `monitor` exists.
      onBatch: (batch) => {
        if (monitor.silenced) return
        this.guard(id, () => this.deps.onBatch(batch, info))
      },
    })
    const info: MonitorInfo = {
      id,
      sessionID: request.sessionID,
      label: sanitizeLabel(request.label ?? programName(first?.argv ?? [])),
      pattern: request.matchPattern || undefined,
      wakePattern: wakeFilter ? request.wakePattern : undefined,
      wakeLimit: wakeFilter ? wakeLimit : 0,
      startedAt: this.scheduler.now(),
      endedAt: undefined,
      timeoutMs,
      status: { kind: "running" },
      stoppedBy: undefined,
      counters: pipeline.ring.counters,
    }
    const monitor: Monitor = {
      info,
      pipeline,
      process: child,
      stopSignal: undefined,
      timedOut: false,
      leaderExited: false,
      silenced: false,
      pipesHeld: false,
      done: Promise.resolve(),
    }
    this.monitors.set(id, monitor)
    monitor.done = this.supervise(monitor).catch((error) => this.report(id, error))
    this.guard(id, () => this.deps.onStarted?.(info))
    return info
  }

  /** Stops a monitor of this session; undefined when the id is unknown or belongs to another session. */
  async stop(sessionID: string, monitorId: string, reason: StopReason): Promise<MonitorInfo | undefined> {
    const monitor = this.find(sessionID, monitorId)
    if (!monitor) return undefined
    // Nothing more goes to the agent after its own stop; a person's stop is news to it (SPEC §11).
    monitor.silenced = reason !== "person"
    // A leader that already exited is not stopped: its exit status is what happened.
    const leaderGone = monitor.leaderExited || !pidExists(monitor.process.pid)
    if (monitor.info.status.kind === "running" && monitor.stopSignal === undefined && !leaderGone) {
      monitor.info.stoppedBy = reason
      monitor.stopSignal = monitor.process.terminateGroup(this.config.kill_grace_ms)
    }
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
    return { info: monitor.info, lines: monitor.pipeline.ring.query(query) }
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
    for (const monitor of this.monitors.values()) {
      if (monitor.info.status.kind !== "running") continue
      monitor.info.stoppedBy ??= "shutdown"
      monitor.process.signalGroupNow()
    }
  }

  /** Every monitor with its group leader's pid and its last retained lines (for the state record). */
  snapshot(lastLines: number): MonitorSnapshot[] {
    return [...this.monitors.values()].map(({ info, process, pipeline }) => ({
      info,
      pid: process.pid,
      lastLines: pipeline.ring.query({
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

  /** Runs one monitor from spawn to its terminal batch. */
  private async supervise(monitor: Monitor): Promise<void> {
    const { process: child, pipeline, info } = monitor
    const reading = Promise.all([
      readPipe(child.stdout, (chunk) => pipeline.push("stdout", chunk)).then(() => pipeline.endStream("stdout")),
      readPipe(child.stderr, (chunk) => pipeline.push("stderr", chunk)).then(() => pipeline.endStream("stderr")),
    ]).catch((error) => this.report(info.id, error))
    const deadline = this.scheduler.setTimeout(() => {
      if (monitor.stopSignal !== undefined) return
      monitor.timedOut = true
      monitor.stopSignal = child.terminateGroup(this.config.kill_grace_ms)
    }, info.timeoutMs)

    let exit: ProcessExit = { code: null, signal: null }
    let sentSignal: NodeJS.Signals | null = null
    try {
      exit = await child.exited
      monitor.leaderExited = true
      this.scheduler.clearTimeout(deadline)
      // Read both pipes to EOF so no tail line is lost; a grandchild may hold them open, so the
      // wait is bounded and the rest of the group is then terminated (the monitor owns the group).
      const drained = await settlesWithin(reading, DRAIN_WAIT_MS)
      sentSignal = monitor.stopSignal ? await monitor.stopSignal : null
      if (!drained) await child.trackPipeHolders()
      if (child.groupAlive()) await child.terminateGroup(this.config.kill_grace_ms)
      if (!drained && !(await settlesWithin(reading, 1_000))) {
        monitor.pipesHeld = true
        child.stdout.destroy()
        child.stderr.destroy()
      }
    } catch (error) {
      this.report(info.id, error)
      if (child.groupAlive()) await child.terminateGroup(this.config.kill_grace_ms).catch(() => null)
    } finally {
      this.scheduler.clearTimeout(deadline)
      child.release()
    }

    // Whatever failed above, the monitor ends: a status, the terminal batch, onEnded.
    info.status = statusOf(exit, monitor, sentSignal)
    info.endedAt = this.scheduler.now()
    // The agent (or the session's end) asked for the stop and needs no news of it; a person's stop
    // is news to the agent, so its terminal batch goes out (hooks.ts delivers it without a wake).
    this.guard(info.id, () =>
      info.stoppedBy && info.stoppedBy !== "person" ? pipeline.close() : pipeline.finish(info.status),
    )
    this.retainExited(monitor)
    this.guard(info.id, () => this.deps.onEnded?.(info))
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
    if (this.monitors.has(id)) this.retention.admit(id, monitor.pipeline.ring.compact())
  }

  private forget(id: string): void {
    this.monitors.delete(id)
    this.retention.forget(id)
  }
}

function statusOf(exit: ProcessExit, monitor: Monitor, sentSignal: NodeJS.Signals | null): MonitorStatus {
  const survivors = monitor.process.survivors()
  const leftovers = {
    ...(survivors.length > 0 ? { survivors } : {}),
    ...(monitor.pipesHeld ? { pipesHeld: true } : {}),
  }
  return { ...endStatus(exit, monitor, sentSignal), ...leftovers } as MonitorStatus
}

function endStatus(exit: ProcessExit, monitor: Monitor, sentSignal: NodeJS.Signals | null): MonitorStatus {
  if (monitor.timedOut) return { kind: "timed_out", afterMs: monitor.info.timeoutMs, signal: exit.signal ?? sentSignal }
  if (monitor.info.stoppedBy === "person") return { kind: "stopped", signal: exit.signal ?? sentSignal, byPerson: true }
  if (monitor.info.stoppedBy) return { kind: "stopped", signal: exit.signal ?? sentSignal }
  if (exit.code === null) return { kind: "signaled", signal: exit.signal ?? "unknown" }
  return { kind: "exited", code: exit.code }
}

/** False once the process is reaped (its exit event may still be on its way). */
function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

function randomMonitorId(): string {
  return `mon_${Buffer.from(crypto.getRandomValues(new Uint8Array(4))).toString("hex")}`
}

function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms)
    promise.then(() => {
      clearTimeout(timer)
      resolve(true)
    })
  })
}
