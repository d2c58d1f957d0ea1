import type { MonitorConfig } from "./config"
import { MonitorError } from "./errors"
import { type MonitorInfo, MonitorRun } from "./monitor-run"
import type { OutputBatch } from "./pipeline/batcher"
import { compileLineFilter, type LineFilter, PatternError } from "./pipeline/filter"
import { createMonitorPipeline } from "./pipeline/pipeline"
import { type MonitoredProcess, SpawnError, spawnInGroup } from "./process/process-group"
import type { ProcessTable } from "./process/process-table"
import { findMissingProgram } from "./process/program-check"
import type { ReadShare } from "./process/read-pipe"
import type { Scheduler } from "./scheduler"
import type { StartRequest } from "./start-request"

export type LaunchDeps = {
  config: MonitorConfig
  scheduler: Scheduler
  env?: NodeJS.ProcessEnv
  /** The shell commands run in (process/shell.ts resolves it); `sh` when not given. */
  shell?: () => string
  /** The process table monitors are tracked with (process/process-table.ts); this server's when not given. */
  processTable?: ProcessTable
  /** The monitor may still cause a match wake (`wake_limit` not used up); past it a match is a plain line. */
  matchWakeLeft?: (monitorId: string, wakeLimit: number) => boolean
  /** The share of a core reading output may take, for every monitor of the plugin instance. */
  readShare?: ReadShare
  /** A batch that may go out (no stop asked for quiet). */
  deliver: (batch: OutputBatch, monitor: MonitorInfo) => void
  /** The supervision of the monitor failed somewhere; it still ends with a status. */
  onError: (monitorId: string, error: unknown) => void
}

type Filters = { match: LineFilter | undefined; wake: LineFilter | undefined }

/** The run of a spawned process: its pipeline (filters, ring, batches) and its supervision. */
export function superviseRun(
  id: string,
  request: StartRequest,
  filters: Filters,
  child: MonitoredProcess,
  deps: LaunchDeps,
): MonitorRun {
  const pipeline = createMonitorPipeline({
    monitorId: id,
    config: deps.config,
    filter: filters.match,
    wakeFilter: filters.wake,
    silenceMs: request.silenceMs,
    matchWakeLeft: () => deps.matchWakeLeft?.(id, request.wakeLimit) ?? true,
    scheduler: deps.scheduler,
    // Batches only flow once the process runs, after `run` exists.
    onBatch: (batch) => {
      if (run.delivering) deps.deliver(batch, info)
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
    startedAt: deps.scheduler.now(),
    endedAt: undefined,
    timeoutMs: request.timeoutMs,
    status: { kind: "running" },
    ending: undefined,
    counters: pipeline.ring.counters,
  }
  const run = new MonitorRun(info, pipeline, child, {
    scheduler: deps.scheduler,
    killGraceMs: deps.config.kill_grace_ms,
    readShare: deps.readShare,
    onError: (error) => deps.onError(id, error),
  })
  return run
}

/** The start's match_pattern and wake_pattern, compiled; invalid_pattern when one is bad. */
export async function compileFilters(request: StartRequest, config: MonitorConfig): Promise<Filters> {
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

/** The start's command spawned in its own process group; spawn_failed when it cannot start. */
export async function spawnRequest(request: StartRequest, deps: LaunchDeps): Promise<MonitoredProcess> {
  const env = deps.env ?? process.env
  const shell = deps.shell?.() ?? "sh"
  const fields = { label: request.label, cwd: request.directory }
  const failed = (why: string) =>
    new MonitorError("spawn_failed", `Cannot start the command (${request.label}): ${why}.`, fields)
  const missing = findMissingProgram(request.program, request.command, shell, request.directory, env.PATH)
  if (missing) throw failed(missing)
  try {
    return await spawnInGroup({
      command: request.command,
      shell,
      cwd: request.directory,
      killGraceMs: deps.config.kill_grace_ms,
      env,
      table: deps.processTable,
      unbufferedRuntimes: deps.config.unbuffered_runtimes,
    })
  } catch (error) {
    throw error instanceof SpawnError ? failed(error.message) : error
  }
}
