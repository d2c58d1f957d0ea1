import type { DropCounts, OutputBatch } from "../pipeline/batcher"
import type { Scheduler, TimerHandle } from "../scheduler"
import type { WakeReason } from "./match-wake"

/** One batch on its way to one session. */
export type Delivery = {
  key: string
  sessionID: string
  batch: OutputBatch
  label: string
  /** Routed as a wake: the terminal batch, or a running batch with a match (a candidate). */
  wake: boolean
  subagentSessionID?: string
  /** The batch's own drops plus those of streaming batches coalesced into this one. */
  dropped: DropCounts
  firstQueuedAt: number
  attempts: number
  /** Failed attempts (sends, checks of an unsure send, identity reads): the backoff doubles with each. */
  failures: number
  firstFailureAt?: number
  /** No attempt before this time (backoff after a failure). */
  retryAt: number
  /** When a send that may have reached the server was made: the history is checked before anything else. */
  unsureSince?: number
  lastError?: string
  /** How many match wakes this monitor may cause (`wake_limit`); 0 = none. */
  wakeLimit: number
  /** Decided at send time: this running batch wakes the session, for this reason. */
  matchWake?: WakeReason
  /** Not sent before this time (a match wake waiting for wake_min_interval_ms or the session cap). */
  notBefore: number
}

/** The queue of one session and its timer. One step at a time: one asked for meanwhile runs right after. */
export class SessionQueue {
  deliveries: Delivery[] = []
  holdUntil = 0
  lastDeferral: string | undefined
  /** A step runs (the queue is not dropped under it). */
  busy = false
  private timer: TimerHandle | undefined
  private again = false

  constructor(
    readonly sessionID: string,
    private readonly scheduler: Scheduler,
    private readonly step: (queue: SessionQueue) => Promise<void>,
    private readonly onIdle: (queue: SessionQueue) => void,
  ) {}

  async pump(): Promise<void> {
    if (this.busy) {
      this.again = true
      return
    }
    this.busy = true
    try {
      do {
        this.again = false
        await this.step(this)
      } while (this.again)
    } finally {
      this.busy = false
      this.onIdle(this)
    }
  }

  /** The next step in `delayMs` (replacing any earlier timer); nothing when the queue is empty. */
  schedule(delayMs: number): void {
    if (this.deliveries.length === 0) return
    this.after(delayMs, () => void this.pump())
  }

  /** Runs `callback` in `delayMs` on the queue's one timer (replacing any earlier one). */
  after(delayMs: number, callback: () => void): void {
    this.cancelTimer()
    this.timer = this.scheduler.setTimeout(callback, Math.max(1, delayMs))
  }

  cancelTimer(): void {
    if (this.timer !== undefined) this.scheduler.clearTimeout(this.timer)
  }

  remove(delivery: Delivery): void {
    this.deliveries = this.deliveries.filter((d) => d !== delivery)
  }
}
