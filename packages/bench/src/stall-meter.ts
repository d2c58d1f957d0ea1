/**
 * Measures event-loop stalls the way a user of the server would feel them: a 20 ms setInterval
 * timer records the gap between consecutive firings. A loop that is never blocked shows ~20 ms;
 * the longest gap is the STALL figure of a measurement.
 */
export const STALL_INTERVAL_MS = 20

export type StallReport = {
  /** Longest gap between two firings (ms); ~20 when the timer always fires on time. */
  maxGapMs: number
  p95GapMs: number
  ticks: number
  /** Firings that came more than 2× the interval late. */
  lateTicks: number
}

export class StallMeter {
  private timer: ReturnType<typeof setInterval> | undefined
  private last = 0
  private gaps: number[] = []

  start(): this {
    this.stop()
    this.gaps = []
    this.last = performance.now()
    this.timer = setInterval(() => {
      const now = performance.now()
      this.gaps.push(now - this.last)
      this.last = now
    }, STALL_INTERVAL_MS)
    return this
  }

  /** Stops the timer; the time since the last firing counts as a gap too (a stall at the end). */
  stop(): StallReport {
    if (this.timer !== undefined) {
      clearInterval(this.timer)
      this.timer = undefined
      const tail = performance.now() - this.last
      if (tail > STALL_INTERVAL_MS) this.gaps.push(tail)
    }
    const gaps = this.gaps
    let maxGap = 0
    let late = 0
    for (const gap of gaps) {
      if (gap > maxGap) maxGap = gap
      if (gap > 2 * STALL_INTERVAL_MS) late++
    }
    const ordered = [...gaps].sort((a, b) => a - b)
    const p95Index = Math.max(0, Math.ceil(0.95 * ordered.length) - 1)
    return { maxGapMs: maxGap, p95GapMs: ordered[p95Index] ?? 0, ticks: gaps.length, lateTicks: late }
  }
}
