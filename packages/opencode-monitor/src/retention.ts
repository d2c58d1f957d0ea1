import type { MonitorConfig } from "./config"
import type { Scheduler, TimerHandle } from "./scheduler"

/** Estimated bytes of retained output and exited monitors across the server; how long one stays readable. */
type RetentionLimits = Pick<MonitorConfig, "retained_max_bytes" | "retained_max_monitors" | "retained_max_age_ms">

type Entry = { id: string; bytes: number; endedAt: number }

/** The server-wide budget of exited monitors (count, bytes, age), oldest-ended first; a running one has its ring. */
export class ExitedRetention {
  // Insertion order is end order, so the first entry is always the oldest.
  private readonly entries = new Map<string, Entry>()
  private bytes = 0
  private timer: TimerHandle | undefined

  constructor(
    private readonly limits: RetentionLimits,
    private readonly scheduler: Scheduler,
    private readonly evict: (id: string) => void,
  ) {}

  get totals(): { count: number; bytes: number } {
    return { count: this.entries.size, bytes: this.bytes }
  }

  /** A monitor ended with `bytes` of retained output; older ones leave while over budget. */
  admit(id: string, bytes: number): void {
    this.forget(id)
    this.entries.set(id, { id, bytes, endedAt: this.scheduler.now() })
    this.bytes += bytes
    this.enforce()
  }

  /** The monitor was forgotten by other means (its session was deleted). */
  forget(id: string): void {
    const entry = this.entries.get(id)
    if (!entry) return
    this.entries.delete(id)
    this.bytes -= entry.bytes
  }

  private enforce(): void {
    const now = this.scheduler.now()
    const { retained_max_bytes: maxBytes, retained_max_monitors: maxCount, retained_max_age_ms: maxAgeMs } = this.limits
    for (const entry of this.entries.values()) {
      const over = this.entries.size > maxCount || this.bytes > maxBytes || now - entry.endedAt >= maxAgeMs
      if (!over) break
      this.forget(entry.id)
      this.evict(entry.id)
    }
    this.armExpiry()
  }

  private armExpiry(): void {
    if (this.timer !== undefined) this.scheduler.clearTimeout(this.timer)
    const oldest = this.entries.values().next().value
    if (!oldest) return
    const delay = Math.max(0, oldest.endedAt + this.limits.retained_max_age_ms - this.scheduler.now())
    this.timer = this.scheduler.setTimeout(() => this.enforce(), delay)
  }
}
