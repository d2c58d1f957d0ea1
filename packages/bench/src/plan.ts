import { MB } from "./stats.ts"

/** Sizes and repetitions of one bench run; `--quick` shrinks everything for a ~1 minute smoke run. */
export type Plan = {
  quick: boolean
  /** Repetitions of every measurement; figures are medians over these. */
  reps: number
  /** Size of the mixed stream a child writes as fast as it can. */
  mixedBytes: number
  /** The two `yes`-style floods of ~100-byte lines. */
  floodSmallBytes: number
  floodLargeBytes: number
  /** Plain `yes` (2-byte lines): stopped after this long or this many bytes. */
  yesMs: number
  yesBytes: number
  /** Benchmark 1's `yes | head -c N` stream (2-byte lines), a fixed volume. */
  yesThroughputBytes: number
  /**
   * `--before=<path to another build's packages/opencode-monitor/src>`: run benchmark 1, the share,
   * settle and exit-wake rows against it too.
   */
  before: string | undefined
  /** Three monitors printing full speed. */
  concurrentYesMs: number
  /** Regex: minimum measuring time per repetition of one pattern. */
  regexMinMs: number
  /** The runaway printer held to `output_cpu_share`: how long `yes` runs, and how many such runs per build. */
  shareMs: number
  shareReps: number
  /** Match wakes timed per shape (a single line, a burst) and build; live exit wakes per build. */
  settleEpisodes: number
  exitWakes: number
}

export function makePlan(quick: boolean, before?: string): Plan {
  return quick
    ? {
        quick,
        reps: 3,
        mixedBytes: 32 * MB,
        floodSmallBytes: 128 * MB,
        floodLargeBytes: 512 * MB,
        yesMs: 2_000,
        yesBytes: 256 * MB,
        yesThroughputBytes: 32 * MB,
        before,
        concurrentYesMs: 2_000,
        regexMinMs: 40,
        shareMs: 10_000,
        shareReps: 1,
        settleEpisodes: 5,
        exitWakes: 5,
      }
    : {
        quick,
        reps: 5,
        mixedBytes: 256 * MB,
        floodSmallBytes: 512 * MB,
        floodLargeBytes: 2048 * MB,
        yesMs: 10_000,
        yesBytes: 1024 * MB,
        // 128 MB until the share cap: held to a quarter of a core, 128 MB through the server path took minutes a run.
        yesThroughputBytes: 64 * MB,
        before,
        concurrentYesMs: 10_000,
        regexMinMs: 200,
        shareMs: 60_000,
        shareReps: 3,
        settleEpisodes: 20,
        exitWakes: 20,
      }
}

export const log = (message: string): void => {
  process.stderr.write(`[bench] ${message}\n`)
}
