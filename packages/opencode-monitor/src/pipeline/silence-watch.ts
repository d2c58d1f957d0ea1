import type { Scheduler, TimerHandle } from "../scheduler"

/**
 * Notices a running monitor that printed nothing, on either stream, for `silenceMs`
 * (`wake_on_silence_ms`, SPEC §15). Output only stamps the time: one timer at a time is armed for
 * the earliest moment the silence could be reached, and when it fires early (output came since)
 * it is armed again for the rest. So a chatty monitor costs one timer per `silenceMs` (at least a
 * second), never one per line. `onSilence` runs once per silence: after it, nothing is armed
 * until the process prints again.
 */
export class SilenceWatch {
  private lastOutputAt: number
  private timer: TimerHandle | undefined
  private stopped = false

  constructor(
    private readonly silenceMs: number,
    private readonly scheduler: Scheduler,
    private readonly onSilence: () => void,
  ) {
    this.lastOutputAt = scheduler.now()
    this.arm(silenceMs)
  }

  /** The process printed something: the silence starts again from now. */
  output(): void {
    this.lastOutputAt = this.scheduler.now()
    if (this.timer === undefined && !this.stopped) this.arm(this.silenceMs)
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
    if (silent < this.silenceMs) this.arm(this.silenceMs - silent)
    else this.onSilence()
  }
}
