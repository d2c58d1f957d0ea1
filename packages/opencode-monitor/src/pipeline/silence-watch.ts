import { SILENCE_MS_MAX } from "../config"
import type { Scheduler, TimerHandle } from "../scheduler"

/**
 * Notices a running monitor that printed nothing, on either stream, for `wake_on_silence_ms`. Output
 * only stamps the time; one timer, armed for the earliest moment the silence could be reached,
 * re-arms for the rest when output came since: no timer work per line. `onSilence` runs once per
 * silence; nothing is armed until the process prints again, and the next silence must be twice as long.
 */
export class SilenceWatch {
  private lastOutputAt: number
  private timer: TimerHandle | undefined
  private stopped = false

  constructor(
    /** The silence that wakes: `wake_on_silence_ms`, doubled after each wake. */
    private threshold: number,
    private readonly scheduler: Scheduler,
    private readonly onSilence: (silentMs: number) => void,
  ) {
    this.lastOutputAt = scheduler.now()
    this.arm(threshold)
  }

  /** The process printed something: the silence starts again from now. */
  output(): void {
    this.lastOutputAt = this.scheduler.now()
    if (this.timer === undefined && !this.stopped) this.arm(this.threshold)
  }

  /** The process ended or the monitor was stopped: no silence is reported any more. */
  stop(): void {
    this.stopped = true
    if (this.timer !== undefined) this.scheduler.clearTimeout(this.timer)
    this.timer = undefined
  }

  private arm(ms: number): void {
    this.timer = this.scheduler.setTimeout(() => this.check(), ms)
  }

  private check(): void {
    this.timer = undefined
    if (this.stopped) return
    const silent = this.scheduler.now() - this.lastOutputAt
    if (silent < this.threshold) {
      this.arm(this.threshold - silent)
      return
    }
    const reached = this.threshold
    this.threshold = Math.min(2 * this.threshold, SILENCE_MS_MAX)
    this.onSilence(reached)
  }
}
