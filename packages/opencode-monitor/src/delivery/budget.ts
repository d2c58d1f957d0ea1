import { addDrops, isTerminalBatch, NO_DROPS, type OutputBatch, sizeOf } from "../pipeline/batcher"
import type { MonitorConfig } from "../config"
import type { MonitorLine } from "../pipeline/line"
import type { Scheduler, TimerHandle } from "../scheduler"
import { chooseLines, ENVELOPE_OVERHEAD_BYTES, estimate, isPriority } from "./budget-choice"
import { ContextLedger } from "./context-ledger"
import { formatMonitorBatch } from "./envelope"
import { countHeld, HeldLines } from "./held-lines"
import type { Route } from "./session-source"
import { TokenBucket } from "./token-bucket"

/** The observation_* options (config.ts, README): a bucket per monitor, a total per session, the summaries. */
export type BudgetOptions = Pick<MonitorConfig, Extract<keyof MonitorConfig, `observation_${string}`>>

export type BudgetDeps = {
  scheduler: Scheduler
  /** Each session's bytes since its last real user turn, shared with the injector (it charges wakes as sent). */
  ledger?: ContextLedger
  /** The next stage (the injector's enqueue); `wakeLimit` is the monitor's `wake_limit` (0 = none). */
  forward: (batch: OutputBatch, route: Route, label: string, wakeLimit: number) => void
}

/** The monitor a batch comes from, as delivery needs it. */
export type BatchOrigin = {
  sessionID: string
  label: string
  /** It has a `match_pattern`: its matching lines are priority lines. */
  hasPattern: boolean
  /** Its `wake_limit` (0 without a `wake_pattern`), passed on to the injector. */
  wakeLimit: number
}

/** …as the budget needs it: whether it may still cause a match wake (the router asks the injector). */
export type BatchSource = Omit<BatchOrigin, "sessionID"> & { matchWakeLeft: boolean }

/** The smallest envelope worth a look at held lines: the envelope's own text and one short line. */
const SMALLEST_ENVELOPE_BYTES = ENVELOPE_OVERHEAD_BYTES + 32

/** A person's message, not one of the synthetic prompts this or another plugin injects. */
export function isRealUserTurn(parts: readonly { type: string; synthetic?: boolean }[]): boolean {
  return parts.some((part) => part.type === "text" && part.synthetic !== true)
}

/** What one monitor has sent into one session, and holds back from it. */
type Stream = {
  sessionID: string
  monitorId: string
  bucket: TokenBucket
  held: HeldLines
  lastEnvelopeAt: number
  /** Sent its one summary that did not fit the session's total: silent until a person writes. */
  summarizedPastBudget: boolean
  /** Where held-back observations go: never a wake route. */
  route: Route
  /** The monitor, as its latest batch described it. */
  source: BatchSource
  timer?: { handle: TimerHandle; at: number }
}

/** Observations get a byte bucket per monitor and a total per session between real user turns; wakes are never held. */
export class ObservationBudget {
  private readonly streams = new Map<string, Stream>()
  private readonly ledger: ContextLedger

  constructor(
    private readonly options: BudgetOptions,
    private readonly deps: BudgetDeps,
  ) {
    this.ledger = deps.ledger ?? new ContextLedger()
  }

  admit(batch: OutputBatch, routed: Route, source: BatchSource): void {
    // A silence wake is not counted against wake_limit: it may wake whatever matches did.
    const wakeLeft = batch.silence !== undefined || source.matchWakeLeft
    const wake = isTerminalBatch(batch) || (routed.wake && wakeLeft)
    // A match past wake_limit is an observation; a subagent's root gets none of it (the child has those lines).
    if (routed.wake && !wake && routed.subagentSessionID !== undefined) return
    const route = routed.wake && !wake ? { ...routed, wake: false } : routed
    const stream = this.stream(batch.monitorId, route, source)
    if (!wake) {
      if (this.options.observation_bytes_per_minute === 0) this.hold(stream, batch)
      else this.admitObservation(stream, batch)
      return
    }
    if (batch.silence && estimate(batch.silence.lines) > this.sessionLeft(stream.sessionID)) return
    // Never held back, and never without a line: a wake after held output shows the latest held line.
    const held = stream.held.latest
    const lines = held && batch.lines.length === 0 && !batch.silence ? [held] : batch.lines
    this.send(stream, this.compose(stream, batch, lines), route)
    if (isTerminalBatch(batch)) this.forgetStream(stream)
  }

  /** The whole batch (with held priority lines) when it fits; else the priority lines that fit, and the latest. */
  private admitObservation(stream: Stream, batch: OutputBatch): void {
    const available = this.room(stream)
    const { held } = stream
    const now = this.deps.scheduler.now()
    if (estimate(held.known) + batch.bytes <= available) {
      this.send(stream, this.compose(stream, batch, [...held.known, ...batch.lines]))
      return
    }
    // Past the bucket: its lines wait for the next look, unless one may be now and a line could go.
    if (available < SMALLEST_ENVELOPE_BYTES || now < held.nextLookAt) {
      this.hold(stream, batch)
      return
    }
    const candidates = held.look(this.priority(stream), now, batch.lines)
    const latest = candidates.length > 0 ? batch.lines.at(-1) : undefined
    const chosen = chooseLines(candidates, latest, available)
    if (chosen) this.send(stream, this.compose(stream, batch, chosen))
    else this.hold(stream, batch, true)
  }

  /** A person wrote in the session: its total, its monitors' buckets and summaries start afresh. */
  onUserTurn(sessionID: string): void {
    this.ledger.delete(sessionID)
    const now = this.deps.scheduler.now()
    for (const stream of this.streams.values()) {
      if (stream.sessionID !== sessionID) continue
      stream.summarizedPastBudget = false
      stream.bucket.fill(now)
    }
  }

  forgetMonitor(monitorId: string): void {
    for (const stream of this.streams.values()) if (stream.monitorId === monitorId) this.forgetStream(stream)
  }

  forgetSession(sessionID: string): void {
    this.ledger.delete(sessionID)
    for (const stream of this.streams.values()) if (stream.sessionID === sessionID) this.forgetStream(stream)
  }

  dispose(): void {
    for (const stream of this.streams.values()) this.forgetStream(stream)
    this.ledger.clear()
  }

  /** Monitor-and-session pairs with state; a monitor's is deleted when it ends. */
  get streamCount(): number {
    return this.streams.size
  }

  /** Bytes charged to a session since its last real user turn (wakes included). */
  spent(sessionID: string): number {
    return this.ledger.spent(sessionID)
  }

  private stream(monitorId: string, route: Route, source: BatchSource): Stream {
    const key = `${route.sessionID}|${monitorId}`
    let stream = this.streams.get(key)
    if (!stream) {
      const now = this.deps.scheduler.now()
      stream = {
        sessionID: route.sessionID,
        monitorId,
        bucket: new TokenBucket(this.options.observation_burst_bytes, this.options.observation_bytes_per_minute, now),
        held: new HeldLines(),
        lastEnvelopeAt: now,
        summarizedPastBudget: false,
        route,
        source,
      }
      this.streams.set(key, stream)
    }
    // A match wake's route is never kept: what the stream sends later is an observation.
    stream.route = route.wake ? { ...route, wake: false } : route
    stream.source = source
    return stream
  }

  private priority(stream: Stream): (line: MonitorLine) => boolean {
    return (line) => isPriority(line, stream.source.hasPattern)
  }

  private room(stream: Stream): number {
    return Math.min(stream.bucket.room(this.deps.scheduler.now()), this.sessionLeft(stream.sessionID))
  }

  private sessionLeft(sessionID: string): number {
    return this.options.observation_session_bytes - this.spent(sessionID)
  }

  /** The envelope's batch showing `shown`; all held since the last envelope is counted in `dropped:` and `budget`. */
  private compose(stream: Stream, batch: OutputBatch, shown: MonitorLine[], summary = false): OutputBatch {
    const { held } = stream
    const visible = new Set(shown)
    const fresh = new Set(batch.lines)
    const count = { lines: held.lines, bytes: held.bytes, firstSeq: held.firstSeq }
    countHeld(
      count,
      batch.lines.filter((line) => !visible.has(line)),
      // Shown lines held earlier were counted then.
      shown.filter((line) => !fresh.has(line)),
    )
    const { lines, bytes, firstSeq } = count
    return {
      ...batch,
      lines: shown,
      bytes: sizeOf(shown),
      dropped: addDrops(held.dropped, batch.dropped, { matched: lines, unmatched: 0, bytes }),
      // A summary always says so: its line is cut by the envelope even when it is the only one held.
      budget:
        lines > 0 || summary
          ? { kind: summary ? "summary" : "held", lines, bytes, sinceSequence: firstSeq - 1 }
          : undefined,
    }
  }

  private cost(stream: Stream, out: OutputBatch): number {
    return Buffer.byteLength(formatMonitorBatch({ batch: out, label: stream.source.label }))
  }

  /** Forwards an envelope, after which the stream holds nothing; a wake (`wakeRoute`) is charged by the injector. */
  private send(stream: Stream, out: OutputBatch, wakeRoute?: Route) {
    if (!wakeRoute) {
      const cost = this.cost(stream, out)
      stream.bucket.take(cost)
      this.ledger.charge(stream.sessionID, cost)
    }
    stream.held = new HeldLines()
    stream.lastEnvelopeAt = this.deps.scheduler.now()
    this.clearTimer(stream)
    this.deps.forward(out, wakeRoute ?? stream.route, stream.source.label, stream.source.wakeLimit)
  }

  private hold(stream: Stream, batch: OutputBatch, looked = false): void {
    stream.held.hold(batch, looked)
    if (this.options.observation_bytes_per_minute > 0) this.arm(stream)
  }

  /**
   * One timer per holding stream: when the oldest held priority line fits (an error printed before a silence
   * still arrives) or the summary is due; unlooked lines are looked at once per refill, not per batch.
   */
  private arm(stream: Stream): void {
    const now = this.deps.scheduler.now()
    const summaryAt = stream.summarizedPastBudget
      ? Number.POSITIVE_INFINITY
      : stream.lastEnvelopeAt + this.options.observation_summary_interval_ms
    const { held } = stream
    const first = held.known[0]
    const need = held.unsorted ? SMALLEST_ENVELOPE_BYTES : first ? estimate([first]) : Number.POSITIVE_INFINITY
    const roomAt =
      need > this.sessionLeft(stream.sessionID) ? Number.POSITIVE_INFINITY : stream.bucket.roomAt(need, now)
    const lineAt = held.unsorted ? Math.max(roomAt, held.nextLookAt) : roomAt
    const look = lineAt < summaryAt && held.unsorted
    const at = Math.max(now + 1, Math.ceil(Math.min(summaryAt, lineAt)))
    if (at === Number.POSITIVE_INFINITY || (stream.timer && stream.timer.at <= at)) return
    this.clearTimer(stream)
    const handle = this.deps.scheduler.setTimeout(() => {
      stream.timer = undefined
      if (!look) return this.onTimer(stream)
      held.look(this.priority(stream), this.deps.scheduler.now())
      this.arm(stream)
    }, at - now)
    stream.timer = { handle, at }
  }

  private onTimer(stream: Stream): void {
    const { held } = stream
    if (!held.lastBatch || held.lines === 0) return
    const available = this.room(stream)
    const chosen = chooseLines(held.look(this.priority(stream), this.deps.scheduler.now()), held.latest, available)
    // The held batch was never forwarded, so its seq is free for the envelope's key.
    const base: OutputBatch = { ...held.lastBatch, lines: [], bytes: 0, dropped: NO_DROPS }
    if (chosen) this.send(stream, this.compose(stream, base, chosen))
    else if (this.deps.scheduler.now() - stream.lastEnvelopeAt >= this.options.observation_summary_interval_ms)
      this.summarize(stream, base)
    else this.arm(stream)
  }

  /** Past the budget: one short summary, the counts and the last line (cut by the envelope). */
  private summarize(stream: Stream, base: OutputBatch): void {
    const summary = this.compose(stream, base, stream.held.latest ? [stream.held.latest] : [], true)
    const pastTotal = this.cost(stream, summary) > this.sessionLeft(stream.sessionID)
    // Past the session's total: one summary per monitor, then silence until a person writes.
    if (pastTotal && stream.summarizedPastBudget) return
    stream.summarizedPastBudget ||= pastTotal
    this.send(stream, summary)
  }

  private clearTimer(stream: Stream): void {
    if (stream.timer !== undefined) this.deps.scheduler.clearTimeout(stream.timer.handle)
    stream.timer = undefined
  }

  private forgetStream(stream: Stream): void {
    this.clearTimer(stream)
    this.streams.delete(`${stream.sessionID}|${stream.monitorId}`)
  }
}
