import { SILENCE_MS_MAX } from "../config"
import type { Scheduler, TimerHandle } from "../scheduler"

/**
 * Notices `wake_on_silence_ms` of no output on either stream. Output only stamps the time (no timer work per
 * line); the timer re-arms for the rest when output came. `onSilence` runs once per silence; the next must
 * follow new output and be twice as long.
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
