import type { DropCounts, OutputBatch } from "../pipeline/batcher"
import type { Scheduler, TimerHandle } from "../scheduler"
import { formatMonitorBatch } from "./envelope"
import { evaluateGates, type Identity, latestUserIdentity } from "./gates"
import { DeliveryError, type SessionApi } from "./session-api"
import type { Route } from "./session-source"

export type InjectorOptions = {
  userMessageWindowMs: number
  pendingRetryMs: number
  postDispatchHoldMs: number
  acceptedMessageSkewMs: number
  /** Opt-in ceiling for a terminal batch waiting on a busy session; undefined or 0 = unbounded. */
  maxActiveDeferMs?: number
  /** Bound on streaming output waiting per monitor and session; the overflow is coalesced. */
  pendingMaxLines: number
  pendingMaxBytes: number
  /** Unfinished assistant messages older than this were cut off by a crash (see evaluateGates). */
  staleTurnsBefore?: number
}

/** One batch on its way to one session. */
export type Delivery = {
  key: string
  sessionID: string
  batch: OutputBatch
  label: string
  wake: boolean
  subagentSessionID: string | undefined
  /** The batch's own drops plus those of streaming batches coalesced into this one. */
  dropped: DropCounts
  firstQueuedAt: number
  attempts: number
  /** The last send may have reached the server: look in the history before sending again. */
  unsure: boolean
  lastError: string | undefined
}

export type InjectorDeps = {
  api: SessionApi
  scheduler: Scheduler
  /** A wake could not be delivered after every retry. */
  onGiveUp?: (delivery: Delivery) => void
}

type SessionQueue = {
  deliveries: Delivery[]
  holdUntil: number
  timer: TimerHandle | undefined
  pumping: boolean
  again: boolean
  lastDeferral: string | undefined
  identity: Identity
}

const MAX_SEND_ATTEMPTS = 8

export const deliveryKey = (batch: OutputBatch): string => `monitor-output:${batch.monitorId}:batch-${batch.batchSeq}`

/**
 * True only when a ceiling is configured, the delivery is a wake (a terminal batch), and it has
 * been queued, counting from its first queue time, for at least the ceiling.
 */
export function shouldForceActiveDispatch(delivery: Delivery, now: number, maxActiveDeferMs: number | undefined): boolean {
  if (!maxActiveDeferMs || maxActiveDeferMs <= 0) return false
  return delivery.wake && !delivery.batch.stillRunning && now - delivery.firstQueuedAt >= maxActiveDeferMs
}

/**
 * Delivers batches into sessions through prompt_async: streaming batches as no-reply
 * observations, a terminal batch as the one prompt that wakes the session. One queue per target
 * session; every send is decided from that session's own state at send time.
 */
export class MonitorOutputInjector {
  private readonly queues = new Map<string, SessionQueue>()
  private readonly sent = new Set<string>()
  private readonly forgottenMonitors = new Set<string>()
  private disposed = false

  constructor(
    private readonly options: InjectorOptions,
    private readonly deps: InjectorDeps,
  ) {}

  enqueue(batch: OutputBatch, route: Route, label: string): void {
    if (this.disposed || this.forgottenMonitors.has(batch.monitorId)) return
    const queue = this.queue(route.sessionID)
    const key = deliveryKey(batch)
    if (this.sent.has(`${route.sessionID}|${key}`) || queue.deliveries.some((d) => d.key === key)) return
    queue.deliveries.push({
      key,
      sessionID: route.sessionID,
      batch,
      label,
      wake: route.wake,
      subagentSessionID: route.subagentSessionID,
      dropped: { ...batch.dropped },
      firstQueuedAt: this.deps.scheduler.now(),
      attempts: 0,
      unsure: false,
      lastError: undefined,
    })
    if (batch.stillRunning) this.coalesce(queue, batch.monitorId)
    void this.pump(route.sessionID)
  }

  /** A `session.idle` of this session: re-check its own queue (never another session's). */
  onSessionIdle(sessionID: string): void {
    if (this.queues.has(sessionID)) void this.pump(sessionID)
  }

  /** Drops everything pending for a monitor and stops its retries, including a send in flight. */
  forgetMonitor(monitorId: string): void {
    this.forgottenMonitors.add(monitorId)
    this.forgetSent((key) => key.includes(`monitor-output:${monitorId}:`))
    for (const [sessionID, queue] of this.queues) {
      queue.deliveries = queue.deliveries.filter((d) => d.batch.monitorId !== monitorId)
      this.dropIfEmpty(sessionID, queue)
    }
  }

  forgetSession(sessionID: string): void {
    this.forgetSent((key) => key.startsWith(`${sessionID}|`))
    const queue = this.queues.get(sessionID)
    if (!queue) return
    queue.deliveries = []
    this.dropIfEmpty(sessionID, queue)
  }

  pending(sessionID: string): readonly Delivery[] {
    return this.queues.get(sessionID)?.deliveries ?? []
  }

  dispose(): void {
    this.disposed = true
    for (const [sessionID, queue] of this.queues) {
      queue.deliveries = []
      this.dropIfEmpty(sessionID, queue)
    }
  }

  private queue(sessionID: string): SessionQueue {
    let queue = this.queues.get(sessionID)
    if (!queue) {
      queue = {
        deliveries: [],
        holdUntil: 0,
        timer: undefined,
        pumping: false,
        again: false,
        lastDeferral: undefined,
        identity: { agent: undefined, model: undefined },
      }
      this.queues.set(sessionID, queue)
    }
    return queue
  }

  /**
   * Keeps a monitor's waiting streaming output within the bound: the oldest waiting batches give
   * way, and what they held is counted in the `dropped:` line of the next batch of that monitor.
   * A terminal batch is never dropped; a batch being sent is never touched.
   */
  private coalesce(queue: SessionQueue, monitorId: string): void {
    const waiting = queue.deliveries.filter((d) => d.batch.monitorId === monitorId && d.batch.stillRunning)
    let lines = 0
    let bytes = 0
    for (const d of waiting) {
      lines += d.batch.lines.length
      bytes += batchBytes(d.batch)
    }
    for (let i = 0; i < waiting.length - 1; i++) {
      if (lines <= this.options.pendingMaxLines && bytes <= this.options.pendingMaxBytes) break
      const oldest = waiting[i] as Delivery
      if (oldest.attempts > 0) continue
      const next = waiting[i + 1] as Delivery
      const oldestBytes = batchBytes(oldest.batch)
      next.dropped = {
        matched: next.dropped.matched + oldest.dropped.matched + oldest.batch.lines.length,
        unmatched: next.dropped.unmatched + oldest.dropped.unmatched,
        bytes: next.dropped.bytes + oldest.dropped.bytes + oldestBytes,
      }
      lines -= oldest.batch.lines.length
      bytes -= oldestBytes
      queue.deliveries.splice(queue.deliveries.indexOf(oldest), 1)
    }
  }

  private async pump(sessionID: string): Promise<void> {
    const queue = this.queues.get(sessionID)
    if (!queue) return
    if (queue.pumping) {
      queue.again = true
      return
    }
    queue.pumping = true
    try {
      do {
        queue.again = false
        await this.step(sessionID, queue)
      } while (queue.again && !this.disposed)
    } finally {
      queue.pumping = false
      this.dropIfEmpty(sessionID, queue)
    }
  }

  /** One decision for a session's queue: force, wait, or send the next delivery. */
  private async step(sessionID: string, queue: SessionQueue): Promise<void> {
    const { scheduler, api } = this.deps
    if (queue.deliveries.length === 0) return
    const now = scheduler.now()

    const forced = queue.deliveries.find((d) => shouldForceActiveDispatch(d, now, this.options.maxActiveDeferMs))
    if (forced) {
      // Over the ceiling the session is not asked whether it is idle: the running loop picks the
      // wake up at its next step. Agent and model still come from the session's history.
      await this.refreshIdentity(sessionID, queue)
      await this.send(queue, forced, { force: true, reason: "max_active_defer_ms reached" })
      return this.schedule(sessionID, queue, this.options.postDispatchHoldMs)
    }
    if (now < queue.holdUntil) return this.schedule(sessionID, queue, queue.holdUntil - now)

    let decision: ReturnType<typeof evaluateGates>
    try {
      const [busy, messages] = await Promise.all([api.busySessions(), api.recentMessages(sessionID)])
      decision = evaluateGates({
        sessionID,
        busy,
        messages,
        now: scheduler.now(),
        userMessageWindowMs: this.options.userMessageWindowMs,
        staleTurnsBefore: this.options.staleTurnsBefore,
      })
    } catch (error) {
      this.defer(queue, `session state unavailable: ${errorText(error)}`)
      return this.schedule(sessionID, queue, this.options.pendingRetryMs)
    }
    queue.identity = decision.identity ?? queue.identity
    if (!decision.open) {
      this.defer(queue, decision.reason)
      return this.schedule(sessionID, queue, this.options.pendingRetryMs)
    }
    queue.lastDeferral = undefined
    const next = queue.deliveries[0]
    if (!next) return
    const sent = await this.send(queue, next, { force: false, reason: "session idle" })
    if (sent) queue.holdUntil = scheduler.now() + this.options.postDispatchHoldMs
    this.schedule(sessionID, queue, sent ? this.options.postDispatchHoldMs : this.options.pendingRetryMs)
  }

  /** Sends one delivery; true when it is known to be in the session. */
  private async send(queue: SessionQueue, delivery: Delivery, how: { force: boolean; reason: string }): Promise<boolean> {
    const { api } = this.deps
    const fields = this.logFields(delivery, how.force)
    if (delivery.unsure && (await this.alreadyInHistory(delivery))) {
      this.settle(queue, delivery)
      api.log("info", "monitor output was already accepted", { ...fields, reason: "found in session history" })
      return true
    }
    delivery.attempts++
    const text = formatMonitorBatch({
      batch: { ...delivery.batch, dropped: delivery.dropped },
      label: delivery.label,
      subagentSessionID: delivery.subagentSessionID,
    })
    try {
      await api.prompt(delivery.sessionID, {
        noReply: !delivery.wake,
        agent: queue.identity.agent,
        model: queue.identity.model,
        text,
        metadata: {
          "opencode-monitor": { key: delivery.key, monitorId: delivery.batch.monitorId, noReply: !delivery.wake },
        },
      })
    } catch (error) {
      return this.failed(queue, delivery, error, fields)
    }
    this.settle(queue, delivery)
    api.log("info", how.force ? "forced monitor output into a busy session" : "sent monitor output", {
      ...fields,
      reason: how.reason,
      attempts: delivery.attempts,
    })
    return true
  }

  private failed(queue: SessionQueue, delivery: Delivery, error: unknown, fields: Record<string, unknown>): boolean {
    const { api } = this.deps
    const kind = error instanceof DeliveryError ? error.kind : "ambiguous"
    delivery.lastError = errorText(error)
    if (!queue.deliveries.includes(delivery)) return false // forgotten while in flight
    if (kind === "gone") {
      api.log("warn", "session is gone; dropping its monitor output", { ...fields, error: delivery.lastError })
      this.forgetSession(delivery.sessionID)
      return false
    }
    if (kind === "ambiguous") delivery.unsure = true
    if (delivery.attempts >= MAX_SEND_ATTEMPTS) {
      queue.deliveries = queue.deliveries.filter((d) => d !== delivery)
      api.log("error", "monitor output could not be delivered; giving up", { ...fields, error: delivery.lastError })
      this.deps.onGiveUp?.(delivery)
      return false
    }
    api.log("warn", "monitor output send failed; will retry", { ...fields, kind, error: delivery.lastError })
    return false
  }

  private settle(queue: SessionQueue, delivery: Delivery): void {
    queue.deliveries = queue.deliveries.filter((d) => d !== delivery)
    const prefix = `${delivery.sessionID}|monitor-output:${delivery.batch.monitorId}:`
    // Nothing follows a terminal batch, so its monitor's keys are no longer needed.
    if (delivery.batch.stillRunning) this.sent.add(`${delivery.sessionID}|${delivery.key}`)
    else this.forgetSent((key) => key.startsWith(prefix))
  }

  private forgetSent(matches: (key: string) => boolean): void {
    for (const key of this.sent) if (matches(key)) this.sent.delete(key)
  }

  /** After an ambiguous failure: is this envelope already in the session? */
  private async alreadyInHistory(delivery: Delivery): Promise<boolean> {
    const needle = `monitor_id: ${delivery.batch.monitorId}\nbatch: ${delivery.batch.batchSeq}\n`
    const since = delivery.firstQueuedAt - this.options.acceptedMessageSkewMs
    try {
      const messages = await this.deps.api.recentMessages(delivery.sessionID)
      return messages.some((m) => m.role === "user" && m.created >= since && m.text.includes(needle))
    } catch {
      return false
    }
  }

  private async refreshIdentity(sessionID: string, queue: SessionQueue): Promise<void> {
    try {
      queue.identity = latestUserIdentity(await this.deps.api.recentMessages(sessionID)) ?? queue.identity
    } catch {
      // Keep the identity seen last; a forced wake must not wait on a history read.
    }
  }

  private defer(queue: SessionQueue, reason: string): void {
    if (queue.lastDeferral === reason) return
    queue.lastDeferral = reason
    const head = queue.deliveries[0]
    if (head) this.deps.api.log("info", "monitor output deferred", { ...this.logFields(head, false), reason })
  }

  private schedule(sessionID: string, queue: SessionQueue, delayMs: number): void {
    if (queue.deliveries.length === 0 || this.disposed) return
    if (queue.timer !== undefined) this.deps.scheduler.clearTimeout(queue.timer)
    queue.timer = this.deps.scheduler.setTimeout(() => {
      queue.timer = undefined
      void this.pump(sessionID)
    }, Math.max(1, delayMs))
  }

  private dropIfEmpty(sessionID: string, queue: SessionQueue): void {
    if (queue.deliveries.length > 0 || queue.pumping) return
    if (queue.timer !== undefined) this.deps.scheduler.clearTimeout(queue.timer)
    queue.timer = undefined
    // Keep the hold: a new batch right after a dispatch must still respect it.
    if (queue.holdUntil <= this.deps.scheduler.now()) this.queues.delete(sessionID)
  }

  private logFields(delivery: Delivery, force: boolean): Record<string, unknown> {
    return {
      sessionID: delivery.sessionID,
      monitorId: delivery.batch.monitorId,
      batchSeq: delivery.batch.batchSeq,
      source: delivery.key,
      shouldReply: delivery.wake,
      forceActiveDispatch: force,
    }
  }
}

function batchBytes(batch: OutputBatch): number {
  let bytes = 0
  for (const line of batch.lines) bytes += line.byteLength
  return bytes
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
