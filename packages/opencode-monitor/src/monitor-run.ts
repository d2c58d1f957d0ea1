import type { Ending, Leftovers, MonitorStatus, StopReason } from "./codec"
import type { MonitorConfig } from "./config"
import type { OutputBatch } from "./pipeline/batcher"
import type { LineFilter } from "./pipeline/filter"
import { createMonitorPipeline, type MonitorPipeline } from "./pipeline/pipeline"
import type { RingCounters } from "./pipeline/ring-buffer"
import type { MonitoredProcess, ProcessExit } from "./process/process-group"
import { type ReadShare, readPipe } from "./process/read-pipe"
import { type Scheduler, type TimerHandle, within } from "./scheduler"
import type { StartRequest } from "./start-request"

/** What callers may see of a monitor: never the raw command. */
export type MonitorInfo = Pick<StartRequest, "sessionID" | "label" | "wakePattern" | "wakeLimit" | "timeoutMs"> & {
  id: string
  /** The directory it runs in (the session's). */
  cwd: string
  pattern: string | undefined
  /** `wake_on_silence_ms`; undefined: no silence wake. */
  silenceMs?: number
  startedAt: number
  endedAt: number | undefined
  status: MonitorStatus
  /** How the run came to its end, once that is decided (before the status is known). */
  ending: Ending | undefined
  counters: RingCounters
}

/** What one stop did: "stopped" it, found it "ending" (an exit, deadline or earlier stop came first), or "ended". */
export type StopResult = { info: MonitorInfo; outcome: "stopped" | "ending" | "ended" }

export type RunDeps = {
  config: MonitorConfig
  scheduler: Scheduler
  /** The share of a core reading output may take, shared by every monitor of the plugin instance. */
  readShare: ReadShare
  /** The monitor may still cause a match wake (`wake_limit` not used up); past it a match is a plain line. */
  matchWakeLeft?: (monitorId: string, wakeLimit: number) => boolean
  /** A batch that may go out (no stop asked for quiet). */
  deliver: (batch: OutputBatch, monitor: MonitorInfo) => void
  /** The supervision itself failed somewhere; the run still ends with a status. */
  onError: (monitorId: string, error: unknown) => void
  /** The run ended: status set, terminal batch out; `done` waits for this too. */
  ended: (run: MonitorRun) => void
}

/** The start's match_pattern and wake_pattern, compiled. */
export type Filters = { match: LineFilter | undefined; wake: LineFilter | undefined }

// The wait for the pipes after the leader exited (a grandchild may hold them), then after the group is ended.
const DRAIN_WAIT_MS = 500
const DRAIN_AFTER_TERMINATE_MS = 1_000

/** One process: pipes into the pipeline, a stop at its deadline or on request, a drain after its exit, one status. */
export class MonitorRun {
  readonly info: MonitorInfo
  readonly pipeline: MonitorPipeline
  /** Resolves once the run has ended: status set, terminal batch emitted (or not, after a quiet stop). */
  readonly done: Promise<void>
  /** Nothing more is delivered: set by every stop but a person's, and never lifted. */
  private quiet = false
  private stopSignal: Promise<NodeJS.Signals | null> | undefined

  constructor(
    id: string,
    /** What started it, the raw command included: kept in memory for monitor_restart, never shown or written. */
    readonly request: StartRequest,
    filters: Filters,
    readonly process: MonitoredProcess,
    private readonly deps: RunDeps,
  ) {
    this.pipeline = createMonitorPipeline({
      monitorId: id,
      config: deps.config,
      filter: filters.match,
      wakeFilter: filters.wake,
      silenceMs: request.silenceMs,
      matchWakeLeft: () => deps.matchWakeLeft?.(id, request.wakeLimit) ?? true,
      scheduler: deps.scheduler,
      onBatch: (batch) => {
        if (!this.quiet) deps.deliver(batch, this.info)
      },
    })
    this.info = {
      id,
      sessionID: request.sessionID,
      label: request.label,
      cwd: request.directory,
      pattern: request.matchPattern,
      wakePattern: request.wakePattern,
      wakeLimit: request.wakeLimit,
      silenceMs: request.silenceMs,
      startedAt: deps.scheduler.now(),
      endedAt: undefined,
      timeoutMs: request.timeoutMs,
      status: { kind: "running" },
      ending: undefined,
      counters: this.pipeline.ring.counters,
    }
    this.done = this.supervise()
      .catch((error) => this.failed(error))
      .then(() => deps.ended(this))
  }

  /** Asks for a stop and waits until the run ended; a leader that already exited is not stopped: its exit stands. */
  async stop(by: StopReason): Promise<StopResult> {
    // Nothing more goes to the agent after its own stop; a person's stop is news to it.
    if (by !== "person") this.quiet = true
    const outcome = this.requestStop(by)
    await this.done
    return { info: this.info, outcome }
  }

  private requestStop(by: StopReason): StopResult["outcome"] {
    if (this.info.status.kind !== "running") return "ended"
    const leaderGone = this.info.ending?.reason === "exit" || !this.process.leaderExists()
    if (this.stopSignal !== undefined || leaderGone) return "ending"
    // A shutdown signal may have decided the ending already (terminateNow): it stands, the stop still escalates.
    const decided = this.info.ending === undefined
    this.info.ending ??= { reason: "stop", by }
    this.stopSignal = this.terminate()
    return decided ? "stopped" : "ending"
  }

  /** For a signal handler that cannot wait: SIGTERM to the group now (its watchdog SIGKILLs later). */
  terminateNow(): void {
    if (this.info.status.kind !== "running") return
    this.info.ending ??= { reason: "stop", by: "shutdown" }
    this.process.signalGroupNow()
  }

  private async supervise(): Promise<void> {
    const { process: child, pipeline, info, deps } = this
    const reading = Promise.all(
      (["stdout", "stderr"] as const).map(async (stream) => {
        await readPipe(child[stream], (chunk) => pipeline.push(stream, chunk), deps.readShare)
        pipeline.endStream(stream)
      }),
    )
      .catch((error) => this.failed(error))
      .then(() => true)
    const deadline = this.armDeadline()

    let exit: ProcessExit = { code: null, signal: null }
    let sentSignal: NodeJS.Signals | null = null
    let pipesHeld = false
    let leftBehind: NonNullable<Leftovers["leftBehind"]> = []
    try {
      exit = await child.exited
      info.ending ??= { reason: "exit" }
      pipeline.processEnded()
      if (deadline) deps.scheduler.clearTimeout(deadline)
      // Both pipes to EOF, so no tail line is lost; bounded, as a grandchild may hold them (the group is then ended).
      const drained = await within(deps.scheduler, DRAIN_WAIT_MS, reading, false)
      sentSignal = this.stopSignal ? await this.stopSignal : null
      // A daemon that left the session at once (`setsid … &`) still carries the token: found, stopped, named.
      leftBehind = await child.leftBehind(!drained)
      if (leftBehind.length > 0 || child.groupAlive()) await this.terminate()
      if (!drained && !(await within(deps.scheduler, DRAIN_AFTER_TERMINATE_MS, reading, false))) {
        pipesHeld = true
        child.stdout.destroy()
        child.stderr.destroy()
      }
    } catch (error) {
      this.failed(error)
      if (child.groupAlive()) await this.terminate()
    } finally {
      if (deadline) deps.scheduler.clearTimeout(deadline)
      child.release()
    }
    // Whatever failed above, the run ends with a status and (unless a stop asked for quiet) its terminal batch.
    info.status = statusOf(info, exit, exit.signal ?? sentSignal, {
      ...(leftBehind.length > 0 ? { leftBehind } : {}),
      ...child.leftovers(),
      ...(pipesHeld ? { pipesHeld: true } : {}),
    })
    info.endedAt = deps.scheduler.now()
    this.emitEnd()
  }

  /** No timer at all without a deadline: a dev server lives as long as the session needs it. */
  private armDeadline(): TimerHandle | undefined {
    const { info, deps } = this
    if (info.timeoutMs === undefined) return undefined
    return deps.scheduler.setTimeout(() => {
      if (this.stopSignal !== undefined) return
      // As in requestStop: a shutdown's ending (terminateNow) stands; the group is still escalated.
      info.ending ??= { reason: "deadline" }
      this.stopSignal = this.terminate()
    }, info.timeoutMs)
  }

  /** The group's stop; a failed one (its table could not be read) has sent SIGKILL, and is reported. */
  private terminate(): Promise<NodeJS.Signals | null> {
    return this.process.terminateGroup().catch((error) => {
      this.failed(error)
      return "SIGKILL" as const
    })
  }

  /** The terminal batch, unless the agent or the session's end asked for the stop (a person's stop is news). */
  private emitEnd(): void {
    const { ending } = this.info
    try {
      if (ending?.reason === "stop" && ending.by !== "person") this.pipeline.close()
      else this.pipeline.finish(this.info.status)
    } catch (error) {
      this.failed(error)
    }
  }

  private failed(error: unknown): void {
    this.deps.onError(this.info.id, error)
  }
}

function statusOf(
  info: MonitorInfo,
  exit: ProcessExit,
  signal: NodeJS.Signals | null,
  leftovers: Leftovers,
): MonitorStatus {
  const { ending } = info
  if (ending?.reason === "deadline") return { kind: "timed_out", afterMs: info.timeoutMs ?? 0, signal, ...leftovers }
  if (ending?.reason === "stop")
    return { kind: "stopped", signal, ...(ending.by === "person" ? { byPerson: true } : {}), ...leftovers }
  if (exit.code === null) return { kind: "signaled", signal: exit.signal ?? "unknown", ...leftovers }
  return { kind: "exited", code: exit.code, ...leftovers }
}
