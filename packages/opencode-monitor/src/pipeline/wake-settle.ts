import type { Scheduler, TimerHandle } from "../scheduler"

/** The longest a match wake waits for the lines that follow its match. */
export const WAKE_SETTLE_CEILING_MS = 3_000

/**
 * A match wake's batch is flushed once output pauses for `settleMs`, or WAKE_SETTLE_CEILING_MS after the match,
 * so it carries what follows (a stack trace, expected and received). Lines only stamp a time.
 */
export class WakeSettle {
  /** When the match a wake waits on came; undefined while none waits. */
  since: number | undefined
  private lastLineAt = 0
  private timer: TimerHandle | undefined
  private confirming = false

  constructor(
    private readonly scheduler: Scheduler,
    private readonly settleMs: number,
    private readonly flush: () => void,
  ) {}

  /** A line matched `wake_pattern` at `at` (the time of the read it came in). */
  wake(at: number): void {
    this.lastLineAt = at
    if (this.since !== undefined) return
    this.since = at
    this.timer = this.scheduler.setTimeout(() => this.check(), this.settleMs)
  }

  /** Any other line came at `at`: while settling, the pause starts again. */
  line(at: number): void {
    if (this.since !== undefined) this.lastLineAt = at
  }

  cancel(): void {
    if (this.timer !== undefined) this.scheduler.clearTimeout(this.timer)
    this.timer = undefined
    this.since = undefined
    this.confirming = false
  }

  private check(): void {
    this.timer = undefined
    const now = this.scheduler.now()
    const quiet = now - this.lastLineAt
    const left = (this.since as number) + WAKE_SETTLE_CEILING_MS - now
    const settled = quiet >= this.settleMs || left <= 0
    // A timer runs before the output that waited while the event loop was busy: that output gets one turn to come.
    if (settled && !this.confirming) {
      this.confirming = true
      this.timer = this.scheduler.setTimeout(() => this.check(), 0)
      return
    }
    this.confirming = false
    if (settled) {
      this.since = undefined
      this.flush()
      return
    }
    this.timer = this.scheduler.setTimeout(() => this.check(), Math.min(this.settleMs - quiet, left))
  }
}
