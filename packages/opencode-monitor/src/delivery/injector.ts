import type { MonitorConfig } from "../config"
import { errorText } from "../errors"
import { namedLogger } from "../log"
import { isTerminalBatch, type OutputBatch } from "../pipeline/batcher"
import type { Scheduler } from "../scheduler"
import { coalesceWaiting } from "./coalesce"
import type { ContextLedger } from "./context-ledger"
import { DeliveryPolicy, envelopeText } from "./delivery-policy"
import { evaluateGates, type Identity } from "./gates"
import { RECENT_MESSAGES } from "./history"
import { SessionIdentities } from "./identity"
import { isCandidate, isSilenceReason, MatchWakePolicy, queueMatchWake } from "./match-wake"
import { PersonLast } from "./person-last"
import { DeliveryError, type SessionApi, type SessionMessage } from "./session-api"
import { type Delivery, SessionQueue } from "./session-queue"
import type { Route } from "./session-source"

/** The plugin's options (config.ts), and when this server's turns began. */
export type InjectorOptions = MonitorConfig & {
  /** Unfinished assistant messages older than this were cut off by a crash (see evaluateGates). */
  staleTurnsBefore: number
}

export type InjectorDeps = {
  api: SessionApi
  scheduler: Scheduler
  /** A wake could not be delivered within the give-up bound. */
  onGiveUp: (delivery: Delivery) => void
  /** Each session's context bytes, shared with the observation budget: a match wake is charged when it lands. */
  ledger: ContextLedger
}

/** A wake queued for at least the ceiling (a match wake told to wait counts from the end of that wait). */
function shouldForceActiveDispatch(delivery: Delivery, now: number, maxActiveDeferMs: number): boolean {
  if (!maxActiveDeferMs) return false
  return delivery.wake && now - Math.max(delivery.firstQueuedAt, delivery.notBefore) >= maxActiveDeferMs
}

/**
 * Delivers batches into sessions: observations as no-reply prompts, wakes as prompts that start a
 * turn. One queue per session; every send is decided from that session's own state at send time.
 */
export class MonitorOutputInjector {
  private readonly queues = new Map<string, SessionQueue>()
  /** `<session>|<key>` of streaming batches delivered, until their monitor ends. */
  private readonly sent = new Set<string>()
  private readonly policy: DeliveryPolicy
  readonly identities: SessionIdentities
  private disposed = false
  private readonly matchWakes: MatchWakePolicy
  private readonly personLast: PersonLast
  private readonly log

  constructor(
    private readonly options: InjectorOptions,
    private readonly deps: InjectorDeps,
  ) {
    this.log = namedLogger(deps.api, "injector")
    this.policy = new DeliveryPolicy(options, deps.api, () => deps.scheduler.now())
    this.identities = new SessionIdentities(deps.api)
    this.matchWakes = new MatchWakePolicy(options, deps.scheduler)
    this.personLast = new PersonLast(deps.scheduler)
  }

  /** `wakeLimit`: how many match wakes the batch's monitor may cause (`wake_limit`; 0 = none). */
  enqueue(batch: OutputBatch, route: Route, label: string, wakeLimit = 0): void {
    if (this.disposed) return
    const queue = this.queue(route.sessionID)
    const key = `monitor-output:${batch.monitorId}:batch-${batch.batchSeq}`
    if (this.sent.has(`${route.sessionID}|${key}`) || queue.deliveries.some((d) => d.key === key)) return
    const delivery: Delivery = {
      ...route,
      key,
      batch,
      label,
      dropped: { ...batch.dropped },
      firstQueuedAt: this.deps.scheduler.now(),
      attempts: 0,
      failures: 0,
      retryAt: 0,
      wakeLimit,
      notBefore: 0,
    }
    // A match wake holds one batch at most; while a session is busy, two batches' worth of output wait.
    const { batch_max_lines: maxLines, batch_max_bytes: maxBytes } = this.options
    const withMatchWake = queueMatchWake(queue.deliveries, delivery, { maxLines, maxBytes })
    if (withMatchWake) queue.deliveries = withMatchWake
    else {
      queue.deliveries.push(delivery)
      if (!isTerminalBatch(batch))
        queue.deliveries = coalesceWaiting(queue.deliveries, batch.monitorId, {
          maxLines: 2 * maxLines,
          maxBytes: 2 * maxBytes,
        })
    }
    void queue.pump()
  }

  /** The monitor has match wakes left (`wake_limit`): the budget passes its match through. */
  matchWakeLeft(monitorId: string, wakeLimit: number): boolean {
    return !this.matchWakes.exhausted(monitorId, wakeLimit)
  }

  /**
   * Decides, with the gates open (or the ceiling reached), what an undecided candidate is: a wake, an
   * observation, or "skip": it waits (notBefore set), or it was a subagent's match past the limit, dropped.
   */
  private settleMatchWake(queue: SessionQueue, d: Delivery): "wake" | "observe" | "skip" {
    if (!isCandidate(d) || d.matchWake || d.attempts > 0) return d.wake ? "wake" : "observe"
    const decision = this.matchWakes.decide(d.sessionID, d.batch, d.wakeLimit)
    if (decision.kind === "wake") {
      d.matchWake = decision.reason
      return "wake"
    }
    if (decision.kind === "wait") {
      d.notBefore = decision.until
      this.log.info("match wake waits", { ...logFields(d, false), reason: decision.why, notBefore: d.notBefore })
      return "skip"
    }
    d.wake = false
    if (d.subagentSessionID === undefined) return "observe"
    // A new array: a caller's find() goes on over the old one.
    queue.remove(d)
    return "skip"
  }

  /**
   * A person wrote (`chat.message`, before opencode stores their message): nothing goes in for
   * user_message_window_ms. Returns the creation time that keeps their message after ours.
   */
  async onPersonMessage(sessionID: string, created: number): Promise<number> {
    const kept = await this.personLast.createdFor(sessionID, created)
    if (kept.moved)
      this.log.info("a person's message moved after monitor output created as they wrote", logFields(kept.moved, false))
    return kept.created
  }

  /** `chat.message` of a prompt of ours (`key`): when opencode created it. */
  onOwnMessage(sessionID: string, key: string, created: number): void {
    this.personLast.seen(sessionID, key, created)
  }

  /** A `session.idle` of this session: re-check its own queue (never another session's). */
  onSessionIdle(sessionID: string): void {
    void this.queues.get(sessionID)?.pump()
  }

  /** Drops everything pending for a monitor and stops its retries, including a send in flight. */
  forgetMonitor(monitorId: string): void {
    this.forgetKeys(monitorId)
    for (const queue of [...this.queues.values()]) {
      queue.deliveries = queue.deliveries.filter((d) => d.batch.monitorId !== monitorId)
      this.dropIfEmpty(queue)
    }
  }

  forgetSession(sessionID: string): void {
    this.matchWakes.forgetSession(sessionID)
    this.personLast.forget(sessionID)
    this.forgetSent((key) => key.startsWith(`${sessionID}|`))
    this.identities.forget(sessionID)
    const queue = this.queues.get(sessionID)
    if (!queue) return
    queue.deliveries = []
    this.dropIfEmpty(queue)
  }

  pending(sessionID: string): readonly Delivery[] {
    return this.queues.get(sessionID)?.deliveries ?? []
  }

  dispose(): void {
    this.disposed = true
    for (const sessionID of [...this.queues.keys()]) this.forgetSession(sessionID)
  }

  private queue(sessionID: string): SessionQueue {
    let queue = this.queues.get(sessionID)
    if (!queue) {
      queue = new SessionQueue(
        sessionID,
        this.deps.scheduler,
        (q) => this.step(q),
        (q) => this.dropIfEmpty(q),
      )
      this.queues.set(sessionID, queue)
    }
    return queue
  }

  /** One decision for a session's queue: wait, check an unsure send, or send the next delivery. */
  private async step(queue: SessionQueue): Promise<void> {
    if (this.disposed || queue.deliveries.length === 0) return
    const now = this.deps.scheduler.now()
    // Over the ceiling, a wake goes into the busy session; a match wake only once it is decided as one.
    const forced = queue.deliveries.find(
      (d) =>
        shouldForceActiveDispatch(d, now, this.options.max_active_defer_ms) &&
        this.settleMatchWake(queue, d) === "wake",
    )
    // A match wake told to wait is passed over until its notBefore.
    const next = forced ?? queue.deliveries.find((d) => d.notBefore <= now)
    if (!next) return queue.schedule(Math.min(...queue.deliveries.map((d) => d.notBefore - now)))
    if (next.retryAt > now) return queue.schedule(next.retryAt - now)
    if (!forced && now < queue.holdUntil) return queue.schedule(queue.holdUntil - now)

    if (next.unsureSince !== undefined) {
      const verdict = await this.policy.verify(next)
      if (!this.stillQueued(queue, next)) return
      if (verdict === "found") {
        this.settle(queue, next, "found")
        return queue.schedule(this.options.post_dispatch_hold_ms)
      }
      if (verdict === "unknown") return this.retryLater(queue, next)
    }

    let recent: SessionMessage[] | undefined
    if (!forced) {
      recent = await this.gatesOpen(queue)
      if (!recent) return queue.schedule(this.options.pending_retry_ms)
      if (!this.stillQueued(queue, next)) return queue.schedule(0)
      // A match-wake candidate is decided now, with the gates open; one that waits leaves its place.
      if (this.settleMatchWake(queue, next) === "skip") return queue.schedule(0)
    }
    const identity = await this.identities.resolve(queue.sessionID, recent).catch((error) => {
      // Never send without the session's agent: opencode would switch it to the default agent.
      next.lastError = `identity unavailable: ${errorText(error)}`
    })
    if (!identity) return this.retryLater(queue, next)
    if (!this.stillQueued(queue, next)) return
    // A person's message the history read missed: an observation sent now would be what that turn answers.
    if (!forced && this.personLast.justWrote(queue.sessionID, this.options.user_message_window_ms)) {
      this.defer(queue, "user message within user_message_window_ms")
      return queue.schedule(this.options.pending_retry_ms)
    }
    await this.dispatch(queue, next, identity, forced !== undefined)
  }

  /** Sends one delivery and settles it, or schedules its retry. */
  private async dispatch(queue: SessionQueue, next: Delivery, identity: Identity, forced: boolean): Promise<void> {
    const sent = this.personLast.sending(next)
    const { outcome, kind } = await this.policy.send(next, identity)
    // An ambiguous send may have landed: a person writing now waits to learn when it was created.
    sent(outcome === "sent" || kind === "ambiguous")
    if (!this.stillQueued(queue, next)) return
    if (outcome === "gone") return this.sessionGone(next)
    if (outcome === "failed") {
      const fields = { ...logFields(next, forced), kind, error: next.lastError }
      this.log.warn("monitor output send failed; will retry", fields)
      return this.retryLater(queue, next)
    }
    this.settle(queue, next, forced ? "forced" : "sent")
    if (!forced) queue.holdUntil = this.deps.scheduler.now() + this.options.post_dispatch_hold_ms
    queue.schedule(this.options.post_dispatch_hold_ms)
  }

  /** Reads the session's state and decides: its recent messages when open, undefined (deferred) when not. */
  private async gatesOpen(queue: SessionQueue): Promise<SessionMessage[] | undefined> {
    const { api, scheduler } = this.deps
    const read = [api.busySessions(), api.recentMessages(queue.sessionID, RECENT_MESSAGES)] as const
    const state = await Promise.all(read).catch((error) => {
      const head = queue.deliveries[0]
      if (error instanceof DeliveryError && error.kind === "gone") {
        if (head) this.sessionGone(head)
      } else this.defer(queue, `session state unavailable: ${errorText(error)}`)
    })
    if (!state) return undefined
    const [busy, messages] = state
    this.identities.noteHistory(queue.sessionID, messages)
    const now = scheduler.now()
    const decision = evaluateGates({ ...this.options, sessionID: queue.sessionID, busy, messages, now })
    if (!decision.open) {
      this.defer(queue, decision.reason)
      return undefined
    }
    queue.lastDeferral = undefined
    return messages
  }

  private retryLater(queue: SessionQueue, delivery: Delivery): void {
    const result = this.policy.failed(delivery)
    if ("retryInMs" in result) {
      queue.schedule(result.retryInMs)
      return
    }
    queue.remove(delivery)
    if (isTerminalBatch(delivery.batch)) this.forgetKeys(delivery.batch.monitorId)
    const fields = { ...logFields(delivery, false), attempts: delivery.attempts, error: delivery.lastError }
    if (delivery.wake) {
      this.log.error("monitor exit notice could not be delivered; giving up", fields)
      this.deps.onGiveUp(delivery)
    } else {
      this.log.warn("monitor output could not be delivered; dropped (still in monitor_output)", fields)
    }
    queue.schedule(this.options.pending_retry_ms)
  }

  private sessionGone(delivery: Delivery): void {
    const fields = { ...logFields(delivery, false), error: delivery.lastError }
    this.log.warn("session is gone; dropping its monitor output", fields)
    this.forgetSession(delivery.sessionID)
  }

  private stillQueued(queue: SessionQueue, delivery: Delivery): boolean {
    // Forgotten (monitor stopped, session deleted, disposed) while a call was in flight.
    return !this.disposed && queue.deliveries.includes(delivery) && this.queues.get(queue.sessionID) === queue
  }

  private settle(queue: SessionQueue, delivery: Delivery, how: keyof typeof SETTLED): void {
    queue.remove(delivery)
    // A match wake is never held back by the budget, but what it put into the session is counted.
    if (delivery.matchWake) this.deps.ledger.charge(delivery.sessionID, Buffer.byteLength(envelopeText(delivery)))
    if (!isTerminalBatch(delivery.batch)) this.sent.add(`${delivery.sessionID}|${delivery.key}`)
    else this.forgetKeys(delivery.batch.monitorId)
    const [message, reason] = SETTLED[how]
    this.log.info(message, { ...logFields(delivery, how === "forced"), reason, attempts: delivery.attempts })
  }

  /** The monitor's sent keys and match-wake count: needed only until its terminal batch. */
  private forgetKeys(monitorId: string): void {
    this.forgetSent((key) => key.includes(`|monitor-output:${monitorId}:`))
    this.matchWakes.forgetMonitor(monitorId)
  }

  private forgetSent(matches: (key: string) => boolean): void {
    for (const key of this.sent) if (matches(key)) this.sent.delete(key)
  }

  private defer(queue: SessionQueue, reason: string): void {
    if (queue.lastDeferral === reason) return
    queue.lastDeferral = reason
    const head = queue.deliveries[0]
    if (head) this.log.info("monitor output deferred", { ...logFields(head, false), reason })
  }

  private dropIfEmpty(queue: SessionQueue): void {
    if (queue.deliveries.length > 0 || queue.busy) return
    queue.cancelTimer()
    if (this.queues.get(queue.sessionID) !== queue) return
    // Keep the hold: a new batch right after a dispatch must still respect it; then let go.
    const holdLeft = queue.holdUntil - this.deps.scheduler.now()
    if (holdLeft > 0 && !this.disposed) queue.after(holdLeft, () => this.dropIfEmpty(queue))
    else this.queues.delete(queue.sessionID)
  }
}

/** How a delivery left its queue: the log line and its reason. */
const SETTLED = {
  found: ["monitor output was already accepted", "found in session history"],
  sent: ["sent monitor output", "session idle"],
  forced: ["forced monitor output into a busy session", "max_active_defer_ms reached"],
} as const

function logFields(delivery: Delivery, force: boolean): Record<string, unknown> {
  const { batch, matchWake } = delivery
  return {
    sessionID: delivery.sessionID,
    monitorId: batch.monitorId,
    batchSeq: batch.batchSeq,
    label: delivery.label,
    source: delivery.key,
    shouldReply: delivery.wake,
    forceActiveDispatch: force,
    // `1/3` for the first of three match wakes.
    ...(matchWake
      ? { matchWake: isSilenceReason(matchWake) ? "silence" : `${matchWake.ordinal}/${matchWake.limit}` }
      : {}),
  }
}
