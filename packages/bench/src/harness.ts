import { spawn } from "node:child_process"
import { tmpdir } from "node:os"
import { existsSync } from "node:fs"
import { join, resolve } from "node:path"
import type { MonitorConfig } from "../../opencode-monitor/src/config.ts"
import type { MonitorInfo } from "../../opencode-monitor/src/manager.ts"
import type { OutputBatch } from "../../opencode-monitor/src/pipeline/batcher.ts"
import { type StallReport, StallMeter } from "./stall-meter.ts"
import type { StartFields } from "./start.ts"

// OMO_SRC=<another checkout's packages/opencode-monitor/src> runs that build instead (the "before"
// rows of a before/after comparison measured in one run, each in a fresh process).
export const PLUGIN_SRC = process.env.OMO_SRC
  ? resolve(process.env.OMO_SRC)
  : join(import.meta.dir, "../../opencode-monitor/src")
const { defaultMonitorConfig } = (await import(
  join(PLUGIN_SRC, "config.ts")
)) as typeof import("../../opencode-monitor/src/config.ts")
const { MonitorManager } = (await import(
  join(PLUGIN_SRC, "manager.ts")
)) as typeof import("../../opencode-monitor/src/manager.ts")
// Builds before the redesign (33d736e) have no start request: their manager takes the fields.
const startRequest = existsSync(join(PLUGIN_SRC, "start-request.ts"))
  ? ((await import(
      join(PLUGIN_SRC, "start-request.ts")
    )) as typeof import("../../opencode-monitor/src/start-request.ts"))
  : undefined

// Builds of the flood-throughput work (0547055 to 3c7765a) keep a batch's lines as byte records.
const batchLines = existsSync(join(PLUGIN_SRC, "pipeline/batch-lines.ts"))
  ? ((await import(join(PLUGIN_SRC, "pipeline/batch-lines.ts"))) as {
      linesOf(batch: unknown): { bytes: number }
    })
  : undefined

/**
 * The bytes of a batch's lines. Builds with byte records are read through them: reading `batch.lines`
 * there would make every delivered line an object, which no consumer of a flood does. Older builds'
 * lines have a `byteLength`; the one-line-path build's lines are plain records (`end - start`).
 */
function deliveredBytes(batch: OutputBatch): number {
  if (batchLines) return batchLines.linesOf(batch).bytes
  let bytes = 0
  for (const line of batch.lines as unknown as { byteLength?: number; start: number; end: number }[])
    bytes += line.byteLength ?? line.end - line.start
  return bytes
}

/** Starts a monitor the way monitor_start does (through the one start request of this build). */
async function startMonitor(manager: InstanceType<typeof MonitorManager>, fields: StartFields): Promise<MonitorInfo> {
  if (!startRequest) return (manager.start as unknown as (fields: StartFields) => Promise<MonitorInfo>)(fields)
  const args = {
    command: fields.command,
    label: fields.label,
    match_pattern: fields.matchPattern,
    wake_pattern: fields.wakePattern,
    wake_on_silence_ms: fields.silenceMs,
  }
  return manager.start(await startRequest.parseStartRequest(args, fields, manager.config))
}

/** CPU time (user + system, all threads) this process spent since `since`, in ms. */
export function cpuMsSince(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since)
  return (used.user + used.system) / 1000
}

/** The outcome of reading one command's output, either merely drained or through the plugin. */
export type RunResult = {
  ms: number
  /** CPU time of this process (the one reading the pipe) over the run. */
  cpuMs: number
  bytes: number
  lines: number
  batches: number
  stall: StallReport
  /** A monitor run's `output_cpu_share`; undefined for a drain or a build without one. */
  outputCpuShare?: number
}

const SESSION = "ses_bench"

/**
 * Baseline: runs `sh -c command` the way the plugin spawns it (own process group, stdin closed,
 * both pipes read through node:child_process 'data' events) and counts the bytes and the newlines.
 * `bare`: counts the bytes only (`lines` is NaN): the bare drain every ratio is taken against.
 */
export function drain(command: string, options: { stopAfterMs?: number; bare?: boolean } = {}): Promise<RunResult> {
  const stall = new StallMeter().start()
  const cpu = process.cpuUsage()
  const started = performance.now()
  const child = spawn("sh", ["-c", command], { stdio: ["ignore", "pipe", "pipe"], detached: true, cwd: tmpdir() })
  let bytes = 0
  let newlines = 0
  const count = (chunk: Buffer) => {
    bytes += chunk.length
    if (options.bare) return
    let at = chunk.indexOf(10)
    while (at !== -1) {
      newlines++
      at = chunk.indexOf(10, at + 1)
    }
  }
  const ended = (stream: NodeJS.ReadableStream | null) =>
    new Promise<void>((resolve) => {
      if (!stream) return resolve()
      stream.on("data", count)
      stream.once("end", resolve)
      stream.once("close", resolve)
      stream.once("error", () => resolve())
    })
  const timer =
    options.stopAfterMs === undefined
      ? undefined
      : setTimeout(() => {
          try {
            if (child.pid !== undefined) process.kill(-child.pid, "SIGTERM")
          } catch {
            // already gone
          }
        }, options.stopAfterMs)
  return Promise.all([ended(child.stdout), ended(child.stderr)]).then(() => {
    if (timer !== undefined) clearTimeout(timer)
    const ms = performance.now() - started
    const lines = options.bare ? Number.NaN : newlines
    return { ms, cpuMs: cpuMsSince(cpu), bytes, lines, batches: 0, stall: stall.stop() }
  })
}

/** Per-monitor record of what a MonitorManager run delivered. */
export type MonitorTrace = {
  info: MonitorInfo
  /** Batches delivered, terminal included. */
  batches: number
  /** performance.now() of every batch, only with `traceBatches`. */
  batchTimes: number[]
  startedAt: number
  endedAt: number
  /** Bytes of the delivered lines; only counted with `countBytes` (it costs time in onBatch). */
  deliveredBytes: number
}

export type ManagerRun = {
  ms: number
  cpuMs: number
  stall: StallReport
  monitors: MonitorTrace[]
  /** The share of a core the manager's pipes could take; undefined: this build has no such cap. */
  outputCpuShare: number | undefined
}

/**
 * Runs commands through the real plugin code: one MonitorManager with the default options (or
 * `config`), a counting onBatch, real child processes. Resolves when every monitor ended (or was
 * stopped after `stopAfterMs`).
 */
export async function runMonitors(
  commands: readonly string[],
  options: {
    matchPattern?: string
    wakePattern?: string
    /** `wake_on_silence_ms` of every monitor. */
    silenceMs?: number
    stopAfterMs?: number
    config?: MonitorConfig
    /** Sum the bytes of delivered lines (costs time in onBatch). */
    countBytes?: boolean
    /** Record the time of every batch (an array that grows with the run: keep it out of memory runs). */
    traceBatches?: boolean
    /**
     * Send every batch on through what the server does with it next: routing for a primary session and
     * the observation budget with the configured defaults (the injector is replaced by a counter).
     */
    serverPath?: boolean
  } = {},
): Promise<ManagerRun> {
  const traces = new Map<string, MonitorTrace>()
  const pendingEnds = new Map<string, () => void>()
  const early = new Set<string>()
  const config = {
    ...(options.config ?? defaultMonitorConfig()),
    max_monitors_per_session: Math.max(3, commands.length),
  }
  const downstream = options.serverPath ? await serverPath(config) : undefined
  const onBatch = (batch: OutputBatch, monitor: MonitorInfo) => {
    downstream?.(batch, monitor)
    const trace = traces.get(monitor.id)
    if (!trace) return
    trace.batches++
    if (options.traceBatches) trace.batchTimes.push(performance.now())
    if (options.countBytes) trace.deliveredBytes += deliveredBytes(batch)
  }
  const onEnded = (monitor: MonitorInfo) => {
    const trace = traces.get(monitor.id)
    if (trace) trace.endedAt = performance.now()
    const resolve = pendingEnds.get(monitor.id)
    if (resolve) resolve()
    else early.add(monitor.id)
  }
  const manager = new MonitorManager(config, { onBatch, onEnded })
  const stall = new StallMeter().start()
  const cpu = process.cpuUsage()
  const started = performance.now()
  const ends: Promise<void>[] = []
  for (const command of commands) {
    const startedAt = performance.now()
    const info = await startMonitor(manager, {
      sessionID: SESSION,
      directory: tmpdir(),
      command,
      label: "bench",
      ...(options.matchPattern === undefined ? {} : { matchPattern: options.matchPattern }),
      ...(options.wakePattern === undefined ? {} : { wakePattern: options.wakePattern }),
      ...(options.silenceMs === undefined ? {} : { silenceMs: options.silenceMs }),
    })
    traces.set(info.id, { info, batches: 0, batchTimes: [], startedAt, endedAt: Number.NaN, deliveredBytes: 0 })
    ends.push(
      new Promise<void>((resolve) => {
        if (early.has(info.id)) resolve()
        else pendingEnds.set(info.id, resolve)
      }),
    )
  }
  let stopTimer: ReturnType<typeof setTimeout> | undefined
  if (options.stopAfterMs !== undefined) {
    stopTimer = setTimeout(() => {
      for (const id of traces.keys()) void manager.stop(SESSION, id, "agent")
    }, options.stopAfterMs)
  }
  await Promise.all(ends)
  const ms = performance.now() - started
  const cpuMs = cpuMsSince(cpu)
  if (stopTimer !== undefined) clearTimeout(stopTimer)
  const report = stall.stop()
  await manager.shutdown()
  const outputCpuShare = (config as { output_cpu_share?: number }).output_cpu_share
  return { ms, cpuMs, stall: report, monitors: [...traces.values()], outputCpuShare }
}

/** hooks.ts's path for a batch of a primary session: routeBatch, then the observation budget. */
async function serverPath(config: MonitorConfig): Promise<(batch: OutputBatch, monitor: MonitorInfo) => void> {
  const { ObservationBudget } = (await import(
    join(PLUGIN_SRC, "delivery/budget.ts")
  )) as typeof import("../../opencode-monitor/src/delivery/budget.ts")
  const { routeBatch } = (await import(
    join(PLUGIN_SRC, "delivery/session-source.ts")
  )) as typeof import("../../opencode-monitor/src/delivery/session-source.ts")
  const { realScheduler: scheduler } = (await import(
    join(PLUGIN_SRC, "scheduler.ts")
  )) as typeof import("../../opencode-monitor/src/scheduler.ts")
  let forwarded = 0
  // Builds before the redesign (33d736e) asked `matchWakeLeft` of the budget's deps and took the
  // monitor's fields as arguments; a `--before` run may measure one of them.
  const deps = { scheduler, forward: () => void forwarded++, matchWakeLeft: () => true }
  // The budget reads its options by their config names; builds before that named them in camelCase.
  const options = {
    ...config,
    bytesPerMinute: config.observation_bytes_per_minute,
    burstBytes: config.observation_burst_bytes,
    sessionBytes: config.observation_session_bytes,
    summaryIntervalMs: config.observation_summary_interval_ms,
  }
  const budget = new ObservationBudget(options, deps)
  const oldAdmit = budget.admit.length > 3
  return (batch, monitor) => {
    const hasPattern = monitor.pattern !== undefined
    for (const route of routeBatch({ kind: "primary" }, monitor.sessionID, batch, config.subagent_wake)) {
      const source = { label: monitor.label, hasPattern, wakeLimit: monitor.wakeLimit, matchWakeLeft: true }
      if (oldAdmit)
        (budget.admit as unknown as (...args: unknown[]) => void)(batch, route, monitor.label, hasPattern, 0)
      else budget.admit(batch, route, source)
    }
    if (!batch.stillRunning) budget.forgetMonitor(monitor.id)
  }
}

/** A single monitor run summarised like a drain. */
export async function monitorOnce(
  command: string,
  options: {
    matchPattern?: string
    wakePattern?: string
    silenceMs?: number
    serverPath?: boolean
    stopAfterMs?: number
    /** Another `output_cpu_share` than the default (this build only: older ones have no such option). */
    outputCpuShare?: number
  } = {},
): Promise<RunResult> {
  const { outputCpuShare, ...rest } = options
  const config =
    outputCpuShare === undefined ? {} : { config: { ...defaultMonitorConfig(), output_cpu_share: outputCpuShare } }
  const run = await runMonitors([command], { ...rest, ...config })
  const trace = run.monitors[0] as MonitorTrace
  return {
    ms: run.ms,
    cpuMs: run.cpuMs,
    bytes: Number.NaN,
    lines: trace.info.counters.total,
    batches: trace.batches,
    stall: run.stall,
    ...(run.outputCpuShare === undefined ? {} : { outputCpuShare: run.outputCpuShare }),
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
