/**
 * A bench-only opencode plugin, loaded next to opencode-monitor by the live benchmarks, that
 * measures the opencode server's own event loop: a 20 ms interval timer appends every late
 * firing (gap > 25 ms) with its time to `options.file`. No imports beyond node:fs, so opencode
 * loads it from anywhere.
 */
import { appendFileSync, writeFileSync } from "node:fs"

const INTERVAL_MS = 20
const LATE_MS = 25

export default {
  id: "stall-probe",
  server: async (_input: unknown, options?: Record<string, unknown>) => {
    const file = String(options?.file ?? "")
    if (!file) return {}
    writeFileSync(file, "")
    let last = performance.now()
    const timer = setInterval(() => {
      const now = performance.now()
      const gap = now - last
      last = now
      if (gap > LATE_MS) appendFileSync(file, `${Date.now()} ${gap.toFixed(1)}\n`)
    }, INTERVAL_MS)
    return {
      async dispose() {
        clearInterval(timer)
      },
    }
  },
}

/** Longest gap recorded between `from` and `to` (Date.now() times); the interval itself when none was late. */
export function longestGap(text: string, from: number, to: number): number {
  let longest = INTERVAL_MS
  for (const line of text.split("\n")) {
    const [at, gap] = line.split(" ").map(Number)
    if (at === undefined || gap === undefined || Number.isNaN(gap)) continue
    // A gap ends at `at`; count it when it overlaps the window.
    if (at >= from && at - gap <= to) longest = Math.max(longest, gap)
  }
  return longest
}
