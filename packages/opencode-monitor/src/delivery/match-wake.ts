import { addDrops, carriesMatch, isTerminalBatch, type OutputBatch, sizeOf } from "../pipeline/batcher"
import { lineByteLength, type MonitorLine } from "../pipeline/line"
import type { Scheduler } from "../scheduler"
import type { MonitorConfig } from "../config"
import type { Bounds } from "./coalesce"
import type { Delivery } from "./session-queue"

/** The shortest gap between two match wakes of one monitor; how many one session may get in any minute. */
type MatchWakeOptions = Pick<MonitorConfig, "wake_min_interval_ms" | "max_match_wakes_per_minute">

/** Why an envelope wakes (its `wake:` line): the nth match of `wake_limit`, or a silence. */
export type WakeReason = MatchReason | SilenceReason
type MatchReason = { ordinal: number; limit: number; seqs: number[] }
export type SilenceReason = { silentMs: number; lastSeq: number }

export const isSilenceReason = (reason: WakeReason): reason is SilenceReason => "silentMs" in reason

export type MatchWakeDecision =
  | { kind: "wake"; reason: WakeReason }
  | { kind: "wait"; until: number; why: string }
  | { kind: "observe" }

const MINUTE_MS = 60_000

/** Asked at send time, gates open: does a batch with a match (or silence) wake now, wait, or go as an observation? */
export class MatchWakePolicy {
  private readonly monitors = new Map<string, { count: number; lastAt: number; sessionID: string }>()
  private readonly sessions = new Map<string, number[]>()

  constructor(
    private readonly options: MatchWakeOptions,
    private readonly scheduler: Pick<Scheduler, "now">,
  ) {}

  /** This monitor has used every match wake it may cause: its matches are plain observations. */
  exhausted(monitorId: string, limit: number): boolean {
    return limit <= 0 || (this.monitors.get(monitorId)?.count ?? 0) >= limit
  }

  /**
   * A "wake" is recorded at once (the delivery keeps it across retries): two batches never take one
   * slot. A silence wake shares the interval and the session's cap with match wakes, not `wake_limit`.
   */
  decide(sessionID: string, batch: OutputBatch, limit: number): MatchWakeDecision {
    const monitorId = batch.monitorId
    const match = carriesMatch(batch) && !this.exhausted(monitorId, limit)
    if (!match && !batch.silence) return { kind: "observe" }
    const now = this.scheduler.now()
    const monitor = this.monitors.get(monitorId)
    const { wake_min_interval_ms: minIntervalMs, max_match_wakes_per_minute: perMinute } = this.options
    if (monitor && now - monitor.lastAt < minIntervalMs) {
      return { kind: "wait", until: monitor.lastAt + minIntervalMs, why: "wake_min_interval_ms" }
    }
    const recent = (this.sessions.get(sessionID) ?? []).filter((at) => now - at < MINUTE_MS)
    this.sessions.set(sessionID, recent)
    if (recent.length >= perMinute) {
      return { kind: "wait", until: (recent[0] as number) + MINUTE_MS, why: "max_match_wakes_per_minute" }
    }
    recent.push(now)
    const count = (monitor?.count ?? 0) + (match ? 1 : 0)
    this.monitors.set(monitorId, { count, lastAt: now, sessionID })
    const { silence } = batch
    if (!match && silence) return { kind: "wake", reason: { silentMs: silence.silentMs, lastSeq: silence.lastSeq } }
    const seqs = batch.lines.filter((line) => line.wake).map((line) => line.seq)
    return { kind: "wake", reason: { ordinal: count, limit, seqs } }
  }

  forgetMonitor(monitorId: string): void {
    this.monitors.delete(monitorId)
  }

  /** The session is gone: its cap and the monitors that woke it (no exit wake will follow). */
  forgetSession(sessionID: string): void {
    this.sessions.delete(sessionID)
    for (const [monitorId, monitor] of this.monitors)
      if (monitor.sessionID === sessionID) this.monitors.delete(monitorId)
  }
}

/** A running batch that asks to wake: it carries a match, or it is a silence wake. */
export const carriesWake = (batch: OutputBatch): boolean => batch.silence !== undefined || carriesMatch(batch)

/** A running batch routed as a wake, not yet decided (see MonitorOutputInjector.settleMatchWake). */
export const isCandidate = (d: Delivery) => d.wake && !isTerminalBatch(d.batch)

/**
 * The session's new queue with a delivery that takes part in a match wake (undefined for an ordinary one): a
 * candidate absorbs its monitor's waiting running batches, so matches coalesce into the next wake in order; a
 * terminal batch absorbs a waiting candidate. The ceiling counts from the oldest wake absorbed, not an observation.
 */
export function queueMatchWake(queue: readonly Delivery[], delivery: Delivery, bounds: Bounds): Delivery[] | undefined {
  const { batch } = delivery
  const terminal = isTerminalBatch(batch)
  const waiting = queue.filter(
    (d) => d.batch.monitorId === batch.monitorId && !isTerminalBatch(d.batch) && d.attempts === 0,
  )
  const wakeWaits = isCandidate(delivery) || waiting.some(isCandidate)
  const absorbed = terminal ? waiting.filter(isCandidate) : wakeWaits ? waiting : []
  if (absorbed.length === 0 && !isCandidate(delivery)) return undefined
  for (const older of [...absorbed].reverse()) {
    absorb(delivery, older, bounds)
    if (older.wake) delivery.firstQueuedAt = Math.min(delivery.firstQueuedAt, older.firstQueuedAt)
    delivery.notBefore = Math.max(delivery.notBefore, older.notBefore)
    if (!terminal) delivery.wake ||= older.wake
  }
  // A running batch takes the place of the oldest one it absorbed; a terminal batch goes last.
  const at = !terminal && absorbed[0] ? queue.indexOf(absorbed[0]) : queue.length
  const rest = queue.filter((d) => !absorbed.includes(d))
  return [...rest.slice(0, at), delivery, ...rest.slice(at)]
}

/**
 * `newer` absorbs an older waiting batch of its monitor, under its own key. Over the bounds, non-matching lines give
 * way oldest first, then the latest wake lines (the first match is what the agent asked for), counted in `dropped:`.
 */
function absorb(newer: Delivery, older: Delivery, bounds: Bounds): void {
  const all = [...older.batch.lines, ...newer.batch.lines]
  let bytes = sizeOf(all)
  const dropped = addDrops(older.dropped, newer.dropped)
  const keep = new Array<boolean>(all.length).fill(true)
  let kept = all.length
  const giveWay = (index: number) => {
    const line = all[index] as MonitorLine
    keep[index] = false
    kept--
    bytes -= line.size
    dropped.matched++
    dropped.bytes += lineByteLength(line)
  }
  const over = () => kept > 1 && (kept > bounds.maxLines || bytes > bounds.maxBytes)
  for (let i = 0; i < all.length && over(); i++) if (!all[i]?.wake) giveWay(i)
  for (let i = all.length - 1; i >= 0 && over(); i--) if (keep[i]) giveWay(i)
  const lines = kept === all.length ? all : all.filter((_, i) => keep[i])
  // A silence wake waiting in the older batch stays one when output came after it.
  const silence = newer.batch.silence ?? older.batch.silence
  newer.batch = { ...newer.batch, lines, bytes, ...(silence ? { silence } : {}) }
  newer.dropped = dropped
}
