import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { resultOfChild } from "./fresh-process.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import type { ShareResult, ShareSample } from "./share-child.ts"
import { formatBytesPerSecond, MB, median } from "./stats.ts"

const CHILD = fileURLToPath(new URL("./share-child.ts", import.meta.url))
const TARGET_SHARE = 0.3
const TARGET_STALL_MS = 50
/** The first and the last this long of a run are compared for RSS; shorter runs compare thirds. */
const WINDOW_MS = 10_000

/** Highest RSS over the idle process among the samples in [from, to). */
function peakGrowth(result: ShareResult, from: number, to: number): number {
  const inside = result.samples.filter(([at]) => at >= from && at < to).map(([, , rss]) => rss)
  return Math.max(...inside) - result.idleRssBytes
}

/** CPU ms per wall ms between the samples nearest `from` and `to`. */
function shareBetween(samples: readonly ShareSample[], from: number, to: number): number {
  const first = samples.find(([at]) => at >= from) ?? samples[0]
  const last = [...samples].reverse().find(([at]) => at <= to) ?? samples.at(-1)
  if (!first || !last || last[0] <= first[0]) return Number.NaN
  return (last[1] - first[1]) / (last[0] - first[0])
}

type Summary = {
  share: number
  firstShare: number
  lastShare: number
  firstGrowth: number
  lastGrowth: number
  bytesPerSecond: number
}

/** One run's figures: the share of a core overall and in its first and last window, RSS in both. */
function summarise(result: ShareResult): Summary {
  const window = Math.min(WINDOW_MS, result.ms / 3)
  const end = result.ms
  return {
    share: result.cpuMs / result.ms,
    firstShare: shareBetween(result.samples, 0, window),
    lastShare: shareBetween(result.samples, end - window, end),
    firstGrowth: peakGrowth(result, 0, window),
    lastGrowth: peakGrowth(result, end - window, end + 1),
    // `yes` prints "y\n": two bytes a line.
    bytesPerSecond: (result.lines * 2) / (result.ms / 1000),
  }
}

/** RSS is flat when the last window's peak is no more than the first's by a quarter and 4 MB. */
const flat = (s: Summary) => s.lastGrowth <= s.firstGrowth * 1.25 + 4 * MB

/**
 * A runaway printer is capped by a share of a core: plain `yes` through MonitorManager with the
 * default options (the real child process and `ReadShare`) and on through routing and the
 * observation budget, for `plan.shareMs`, each run in a fresh process. What the server pays: its
 * CPU time over the wall time (a share of one core), its longest event-loop stall, and whether
 * its RSS stays flat (peak over idle in the first and in the last window). With `--before`, the
 * same run against that build (no cap there: about a whole core).
 */
export async function benchShare(plan: Plan): Promise<Row[]> {
  const builds: { label: string; src: string | undefined }[] = [{ label: "", src: process.env.OMO_SRC }]
  if (plan.before) builds.push({ label: " [before]", src: resolve(plan.before) })
  log(`share: \`yes\` for ${plan.shareMs / 1000} s, ${plan.shareReps} run(s) per build, a fresh process each`)
  const runs = new Map<string, ShareResult[]>(builds.map((b) => [b.label, []]))
  for (let rep = 0; rep < plan.shareReps; rep++) {
    for (const build of builds) {
      const env = { ...process.env }
      if (build.src === undefined) delete env.OMO_SRC
      else env.OMO_SRC = build.src
      const result = await resultOfChild<ShareResult>(CHILD, [String(plan.shareMs)], "SHARE_RESULT", env)
      runs.get(build.label)?.push(result)
      const s = summarise(result)
      log(
        `  rep ${rep + 1}${build.label}: ${(s.share * 100).toFixed(0)} % of a core, stall ${result.stallMaxGapMs.toFixed(0)} ms, ` +
          `RSS +${(s.firstGrowth / MB).toFixed(1)} MB first / +${(s.lastGrowth / MB).toFixed(1)} MB last window`,
      )
    }
  }
  return builds.map((build) => shareRow(build.label, build.src, runs.get(build.label) ?? [], plan))
}

function shareRow(label: string, src: string | undefined, results: ShareResult[], plan: Plan): Row {
  const summaries = results.map(summarise)
  const m = (pick: (s: Summary) => number) => median(summaries.map(pick))
  const stall = median(results.map((r) => r.stallMaxGapMs))
  const share = m((s) => s.share)
  const isBefore = label !== ""
  const cap = results[0]?.outputCpuShare
  const window = Math.min(WINDOW_MS, plan.shareMs / 3) / 1000
  const shareMet = share <= TARGET_SHARE
  const stallMet = stall <= TARGET_STALL_MS
  const flatMet = summaries.every(flat)
  return {
    bench: "share of a core",
    case:
      `runaway printer: plain \`yes\` for ${plan.shareMs / 1000} s through MonitorManager + routing + observation budget, ` +
      `default options (output_cpu_share ${cap ?? "– (none in this build)"})${label}`,
    figure:
      `${(share * 100).toFixed(1)} % of one core (CPU-s / wall-s; first ${window.toFixed(0)} s ${(m((s) => s.firstShare) * 100).toFixed(0)} %, ` +
      `last ${window.toFixed(0)} s ${(m((s) => s.lastShare) * 100).toFixed(0)} %); read ${formatBytesPerSecond(m((s) => s.bytesPerSecond))}; ` +
      `peak RSS over idle: first ${window.toFixed(0)} s +${(m((s) => s.firstGrowth) / MB).toFixed(1)} MB, last ${window.toFixed(0)} s +${(m((s) => s.lastGrowth) / MB).toFixed(1)} MB`,
    baseline: "1 core (what an uncapped reader of a flood takes)",
    ratio: share,
    target: isBefore
      ? "–"
      : `≤ ${TARGET_SHARE} core; stall ≤ ${TARGET_STALL_MS} ms; RSS flat (last window ≤ 1.25× first + 4 MB)`,
    met: isBefore ? undefined : shareMet && stallMet && flatMet,
    ...(isBefore ? {} : { verdict: `share ${yesNo(shareMet)}, stall ${yesNo(stallMet)}, RSS flat ${yesNo(flatMet)}` }),
    stallMs: stall,
    stallWorstMs: Math.max(...results.map((r) => r.stallMaxGapMs)),
    runs: results.length,
    detail: {
      src: src ?? "this tree",
      outputCpuShare: cap ?? null,
      summaries,
      ms: results.map((r) => r.ms),
      cpuMs: results.map((r) => r.cpuMs),
      lines: results.map((r) => r.lines),
      idleRssBytes: results.map((r) => r.idleRssBytes),
    },
  }
}

const yesNo = (met: boolean) => (met ? "yes" : "**NO**")
