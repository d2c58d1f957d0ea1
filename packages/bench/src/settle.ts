import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { WAKE_SETTLE_CEILING_MS } from "../../opencode-monitor/src/pipeline/wake-settle.ts"
import { resultOfChild } from "./fresh-process.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import type { SettleResult } from "./settle-child.ts"
import { formatMs, median } from "./stats.ts"

const CHILD = fileURLToPath(new URL("./settle-child.ts", import.meta.url))
/** How far above its expected value a median may land (timer lateness, the read's own delay). */
const SLACK_MS = 100

type Shape = { id: string; what: string; burstMs: number; gapMs: number; expect: (settleMs: number) => number }
const SHAPES: Shape[] = [
  {
    id: "single",
    what: "a single matching line, then silence",
    burstMs: 0,
    gapMs: 2_000,
    expect: (settleMs) => settleMs,
  },
  {
    id: "burst",
    what: "a matching line, then a line every 50–100 ms for 4 s",
    burstMs: 4_000,
    gapMs: 2_000,
    expect: () => WAKE_SETTLE_CEILING_MS,
  },
]

/** For each match printed, the time until the first batch that left the pipeline after it. */
function wakeDelays(result: SettleResult): number[] {
  return result.printedAt.map((printed) => {
    const batch = result.batchAt.find((at) => at >= printed)
    return batch === undefined ? Number.NaN : batch - printed
  })
}

/**
 * A match wake's added delay: from the `wake_pattern` line being printed to the batch carrying it
 * leaving the pipeline (MonitorManager's onBatch, the real scheduler), for a single line followed
 * by silence (expected: `wake_settle_ms`) and for a burst that keeps printing (expected: the
 * settle window's ceiling). Each episode's match is the first line after a silence longer than
 * anything buffered, so the first batch after it is the one carrying it. With `--before`, the
 * same series against that build (which flushed a match on the next tick) is the baseline.
 */
export async function benchSettle(plan: Plan): Promise<Row[]> {
  const builds: { label: string; src: string | undefined }[] = [{ label: "", src: process.env.OMO_SRC }]
  if (plan.before) builds.push({ label: " [before]", src: resolve(plan.before) })
  log(`settle: ${plan.settleEpisodes} match wakes per shape and build, a fresh process each`)
  const results = new Map<string, SettleResult>()
  for (const shape of SHAPES) {
    for (const build of builds) {
      const env = { ...process.env }
      if (build.src === undefined) delete env.OMO_SRC
      else env.OMO_SRC = build.src
      const args = [plan.settleEpisodes, shape.burstMs, shape.gapMs].map(String)
      const result = await resultOfChild<SettleResult>(CHILD, args, "SETTLE_RESULT", env)
      const delays = wakeDelays(result)
      if (delays.some(Number.isNaN)) throw new Error(`settle ${shape.id}${build.label}: a match had no batch after it`)
      results.set(shape.id + build.label, result)
      log(`  ${shape.id}${build.label}: median ${formatMs(median(delays))}, worst ${formatMs(Math.max(...delays))}`)
    }
  }
  return SHAPES.map((shape) => settleRow(shape, results.get(shape.id), results.get(`${shape.id} [before]`)))
}

function settleRow(shape: Shape, result: SettleResult | undefined, before: SettleResult | undefined): Row {
  if (!result) throw new Error(`settle ${shape.id}: no result`)
  const delays = wakeDelays(result)
  const beforeDelays = before ? wakeDelays(before) : []
  const settleMs = result.wakeSettleMs
  const expected = settleMs === null ? undefined : shape.expect(settleMs)
  const mid = median(delays)
  const summary = (values: number[]) => `median ${formatMs(median(values))}, worst ${formatMs(Math.max(...values))}`
  return {
    bench: "match wake settle",
    case:
      `wake_pattern line printed → its batch leaves the pipeline (MonitorManager, real scheduler), ${shape.what}; ` +
      `wake_settle_ms ${settleMs ?? "– (none in this build)"}, ceiling ${WAKE_SETTLE_CEILING_MS} ms`,
    figure: summary(delays),
    baseline: before ? `${summary(beforeDelays)} (before: flushed on the next tick)` : "–",
    ratio: before ? mid / median(beforeDelays) : Number.NaN,
    target:
      expected === undefined ? "–" : `≈ ${expected} ms: median ${expected}–${expected + SLACK_MS} ms (worst reported)`,
    met: expected === undefined ? undefined : mid >= expected && mid <= expected + SLACK_MS,
    stallMs: result.stallMaxGapMs,
    stallWorstMs: result.stallMaxGapMs,
    runs: delays.length,
    detail: { delays, beforeDelays, printedAt: result.printedAt, batchAt: result.batchAt },
  }
}
