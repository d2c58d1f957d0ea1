import type { Scheduler, TimerHandle } from "../../src/scheduler"

type Timer = { id: number; at: number; callback: () => void }

/** A clock that only moves when the test says so. */
export class FakeScheduler implements Scheduler {
  private time = 0
  private nextId = 1
  private timers: Timer[] = []

  now(): number {
    return this.time
  }

  setTimeout(callback: () => void, ms: number): TimerHandle {
    const timer = { id: this.nextId++, at: this.time + Math.max(0, ms), callback }
    this.timers.push(timer)
    return { id: timer.id }
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers = this.timers.filter((t) => t.id !== handle.id)
  }

  get pendingTimers(): number {
    return this.timers.length
  }

  /** Moves the clock forward, firing due timers in time order (timers they set fire too). */
  advance(ms: number): void {
    const end = this.time + ms
    for (;;) {
      const due = this.timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0]
      if (!due) break
      this.timers = this.timers.filter((t) => t !== due)
      this.time = due.at
      due.callback()
    }
    this.time = end
  }
}
