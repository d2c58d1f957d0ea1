import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { resultOfChild } from "./fresh-process.ts"
import type { RunResult } from "./harness.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatBytesPerSecond, formatCount, MB, median } from "./stats.ts"
import { mixedStreamFile, shellQuote } from "./streams.ts"
import type { ThroughputCase } from "./throughput-child.ts"

const CHILD = fileURLToPath(new URL("./throughput-child.ts", import.meta.url))
const GB = 1024 * MB
const HUMAN_SECONDS = 10
const HUMAN_BYTES_PER_SECOND = 1000 * 1024
/**
 * Bytes and lines per CPU-second against the build before the one line path, in the same run: a
 * flood held to `output_cpu_share` runs slower in wall time by design, so CPU per GB is the measure.
 */
const PER_CPU_TARGET = 0.7

type Variant = {
  key: string
  name: string
  stream: "mixed" | "yes" | "human" | "none"
  mode: "drain" | "monitor"
  pattern?: string
  serverPath?: boolean
  /** Target on CPU-seconds per GB, as a multiple of the bare drain's. */
  cpuTarget?: number
  /** A drain that counts bytes only (the "bare drain"): the baseline of every ratio. */
  bare?: boolean
  /** Another `output_cpu_share` than the default; such a variant runs for this build only. */
  outputCpuShare?: number
  /** The bytes (and lines) per CPU-second against the `--before` build must be at least this. */
  perCpuTarget?: number
}

const VARIANTS: Variant[] = [
  { key: "drain", name: "baseline: bare drain (bytes counted only)", stream: "mixed", mode: "drain", bare: true },
  {
    key: "drain-lines",
    name: "reference: drain + a newline count (one indexOf per line), the least a line reader does",
    stream: "mixed",
    mode: "drain",
  },
  {
    key: "none",
    perCpuTarget: PER_CPU_TARGET,
    name: "MonitorManager, no match_pattern (default options)",
    stream: "mixed",
    mode: "monitor",
    cpuTarget: 3,
  },
  {
    key: "server",
    perCpuTarget: PER_CPU_TARGET,
    name: "MonitorManager + the server's next stages (routing, observation budget), no match_pattern",
    stream: "mixed",
    mode: "monitor",
    serverPath: true,
    cpuTarget: 3,
  },
  {
    key: "errwarn",
    perCpuTarget: PER_CPU_TARGET,
    name: "MonitorManager, match_pattern `error|warn`",
    stream: "mixed",
    mode: "monitor",
    pattern: "error|warn",
    cpuTarget: 4,
  },
  {
    key: "typical",
    perCpuTarget: PER_CPU_TARGET,
    name: "MonitorManager, match_pattern `error|warn|FAIL`",
    stream: "mixed",
    mode: "monitor",
    pattern: "error|warn|FAIL",
  },
  {
    key: "adversarial",
    name: "MonitorManager, adversarial match_pattern `(\\w|\\d)+$`",
    stream: "mixed",
    mode: "monitor",
    pattern: "(\\w|\\d)+$",
  },
  {
    key: "human-drain",
    name: "baseline: bare drain, a producer at 1 MB/s for 10 s",
    stream: "human",
    mode: "drain",
    bare: true,
  },
  {
    key: "human",
    name: "MonitorManager + routing + observation budget, a producer at 1 MB/s for 10 s",
    stream: "human",
    mode: "monitor",
    serverPath: true,
  },
  {
    key: "yes-drain",
    name: "baseline: bare drain, plain `yes` (2-byte lines)",
    stream: "yes",
    mode: "drain",
    bare: true,
  },
  {
    key: "yes-drain-lines",
    name: "reference: drain + a newline count, plain `yes` (2-byte lines)",
    stream: "yes",
    mode: "drain",
  },
  {
    key: "yes",
    name: "MonitorManager, plain `yes` (2-byte lines)",
    stream: "yes",
    mode: "monitor",
    perCpuTarget: PER_CPU_TARGET,
  },
  // The same with the share cap off: whether pausing the pipe changes what a GB costs.
  {
    key: "yes-uncapped",
    name: "reference: MonitorManager, plain `yes` (2-byte lines), output_cpu_share 1 (the cap off)",
    stream: "yes",
    mode: "monitor",
    outputCpuShare: 1,
  },
  {
    key: "yes-server",
    name: "MonitorManager + routing + observation budget, plain `yes`",
    stream: "yes",
    mode: "monitor",
    serverPath: true,
    perCpuTarget: PER_CPU_TARGET,
  },
  // What a run costs whatever it reads: spawn, the exit path (for a monitor: the search for what
  // was left behind, its 50 ms rescan, the terminal batch). Taken off the streams' rows, which
  // give the cost of reading as a long flood sees it.
  { key: "fixed-drain", name: "fixed cost: bare drain, `true` (no output)", stream: "none", mode: "drain", bare: true },
  {
    key: "fixed",
    name: "fixed cost: MonitorManager, one monitor of `true`, start to terminal batch",
    stream: "none",
    mode: "monitor",
  },
]

type Measured = RunResult & { bytes: number }

/** Runs one case in a fresh bun process (OMO_SRC set for the "before" build). */
function measure(spec: ThroughputCase, src: string | undefined): Promise<RunResult> {
  const env = { ...process.env }
  if (src === undefined) delete env.OMO_SRC
  else env.OMO_SRC = src
  return resultOfChild<RunResult>(CHILD, [JSON.stringify(spec)], "THROUGHPUT_RESULT", env)
}

const cpuPerGB = (r: Measured) => r.cpuMs / 1000 / (r.bytes / GB)

/** `r` less the median fixed cost of its kind of run (the same build; see the `fixed` variants). */
const lessFixed = (r: Measured, fixed: Measured[]): Measured => ({
  ...r,
  ms: r.ms - median(fixed.map((f) => f.ms)),
  cpuMs: r.cpuMs - median(fixed.map((f) => f.cpuMs)),
})

type Runs = Map<string, Measured[]>
type Build = { label: string; src: string | undefined }

/** The builds a variant runs against: a drain or a variant with its own options, this build only. */
const buildsOf = (variant: Variant, builds: Build[]): Build[] =>
  variant.mode === "drain" || variant.outputCpuShare !== undefined ? builds.slice(0, 1) : builds

/**
 * The medians of one row's runs: a stream's runs net of the fixed cost of their kind of run (the
 * same build), with the gross figures beside them.
 */
function statOf(runs: Runs, key: string, variant?: Variant, label = "") {
  const gross = runs.get(key) ?? []
  const streamed = variant !== undefined && (variant.stream === "mixed" || variant.stream === "yes")
  const fixed = runs.get(variant?.mode === "drain" ? "fixed-drain" : `fixed${label}`) ?? []
  const list = streamed ? gross.map((r) => lessFixed(r, fixed)) : gross
  return {
    list,
    gross,
    rate: median(list.map((r) => r.bytes / (r.ms / 1000))),
    lineRate: median(list.map((r) => r.lines / (r.ms / 1000))),
    cpu: median(list.map(cpuPerGB)),
    linesPerCpuSecond: median(list.map((r) => r.lines / (r.cpuMs / 1000))),
    grossRate: median(gross.map((r) => r.bytes / (r.ms / 1000))),
    grossCpu: median(gross.map(cpuPerGB)),
  }
}

/** The stall, run count and raw times of a row whose figure is a time (fixed cost, human rate). */
function timedRow(list: Measured[], key: string, src: string | undefined) {
  return {
    stallMs: median(list.map((r) => r.stall.maxGapMs)),
    stallWorstMs: Math.max(...list.map((r) => r.stall.maxGapMs)),
    runs: list.length,
    detail: { key, src: src ?? "this tree", ms: list.map((r) => r.ms), cpuMs: list.map((r) => r.cpuMs) },
  }
}

/**
 * Benchmark 1: a child `cat`s a mixed stream (or `yes` writes 2-byte lines) as fast as the pipe takes
 * it; the same stream is either merely drained or read through the whole MonitorManager, in a
 * fresh process that first reads the same stream once, unmeasured: what is measured is the steady
 * state of a flood that goes on (the JIT has compiled the hot code, as it has in a server a
 * runaway printer has kept busy for a while), not a cold start. The
 * baseline of every ratio is the bare drain, which counts bytes only; a drain
 * that also counts newlines, the least any line reader does, is a second, informative reference.
 * Every run is a fresh process. CPU-seconds per GB of the process reading the pipe is the stable
 * figure on a shared machine; MB/s is given too, as a ratio to the bare drain of the same run. Both are
 * net of the run's fixed cost (spawn and exit path, measured in the same run on `true`), so a
 * 256 MB stream shows the rate of a long flood; the gross figures are given beside them. With
 * `--before=<src>` every monitor case also runs against that build, interleaved, in the same run.
 */
export async function benchThroughput(plan: Plan): Promise<Row[]> {
  const file = mixedStreamFile(plan.mixedBytes)
  // The person-paced log is cut from a small file; the floods are warmed with themselves.
  const warm = mixedStreamFile(8 * MB)
  const yesBytes = plan.yesThroughputBytes
  const commands = {
    mixed: {
      command: `cat ${shellQuote(file.path)}`,
      warm: `cat ${shellQuote(file.path)}`,
      bytes: file.bytes,
      lines: file.lines,
    },
    yes: {
      command: `yes | head -c ${yesBytes}`,
      warm: `yes | head -c ${yesBytes}`,
      bytes: yesBytes,
      lines: yesBytes / 2,
    },
    // A person-paced log: 200 KB of the mixed stream every 0.2 s (lines cut where the 200 KB end).
    human: {
      command: `i=0; while [ $i -lt ${HUMAN_SECONDS * 5} ]; do head -c ${HUMAN_BYTES_PER_SECOND / 5} ${shellQuote(file.path)}; sleep 0.2; i=$((i+1)); done`,
      warm: `head -c ${HUMAN_BYTES_PER_SECOND / 5} ${shellQuote(warm.path)}`,
      bytes: HUMAN_SECONDS * HUMAN_BYTES_PER_SECOND,
      lines: Number.NaN,
    },
    none: { command: "true", warm: "true", bytes: 0, lines: 0 },
  }
  // The build measured: this tree, or the one OMO_SRC names (passed on to every child).
  const builds: Build[] = [{ label: "", src: process.env.OMO_SRC }]
  if (plan.before) builds.push({ label: " [before]", src: resolve(plan.before) })
  log(
    `throughput: ${(file.bytes / MB).toFixed(0)} MB mixed stream (${file.lines} lines), ${yesBytes / MB} MB of yes, ` +
      `${plan.reps} reps, fresh process each${plan.before ? `, before = ${plan.before}` : ""}`,
  )

  const runs: Runs = new Map()
  for (let rep = 0; rep < plan.reps; rep++) {
    const parts: string[] = []
    for (const variant of VARIANTS) {
      for (const build of buildsOf(variant, builds)) {
        const stream = commands[variant.stream]
        const spec: ThroughputCase = {
          mode: variant.mode,
          command: stream.command,
          warmCommand: stream.warm,
          ...(variant.pattern === undefined ? {} : { matchPattern: variant.pattern }),
          ...(variant.serverPath ? { serverPath: true } : {}),
          ...(variant.bare ? { bare: true } : {}),
          ...(variant.outputCpuShare === undefined ? {} : { outputCpuShare: variant.outputCpuShare }),
        }
        const result = await measure(spec, build.src)
        if (variant.stream === "mixed" && !variant.bare && result.lines !== file.lines)
          throw new Error(`${variant.name}${build.label}: ${result.lines} of ${file.lines} lines`)
        const key = variant.key + build.label
        const list = runs.get(key) ?? []
        // A bare drain does not count lines: its stream's are known.
        list.push({ ...result, bytes: stream.bytes, lines: variant.bare ? stream.lines : result.lines })
        runs.set(key, list)
        parts.push(`${key} ${result.ms.toFixed(0)} ms ${(result.cpuMs / 1000).toFixed(2)} cpu-s`)
      }
    }
    log(`  rep ${rep + 1}: ${parts.join(", ")}`)
  }

  const rows: Row[] = []
  const stat = (key: string, variant?: Variant, label = "") => statOf(runs, key, variant, label)
  const drainOf = (stream: Variant["stream"]): Variant =>
    VARIANTS.find(
      (v) => v.key === (stream === "mixed" ? "drain" : stream === "none" ? "fixed-drain" : `${stream}-drain`),
    ) as Variant
  for (const variant of VARIANTS) {
    for (const build of buildsOf(variant, builds)) {
      const key = variant.key + build.label
      const s = stat(key, variant, build.label)
      const drainVariant = drainOf(variant.stream)
      const base = stat(drainVariant.key, drainVariant)
      // The drain that also counts newlines, where the stream has one: a second, informative ratio.
      const lineDrain = VARIANTS.find((v) => v.key === `${drainVariant.key}-lines`)
      const vsLineDrain =
        lineDrain && variant.mode === "monitor"
          ? `; vs the drain with a newline count: CPU ${(s.cpu / stat(lineDrain.key, lineDrain).cpu).toFixed(2)}×`
          : ""
      const isDrain = variant.mode === "drain"
      const cpuRatio = s.cpu / base.cpu
      const rateRatio = s.rate / base.rate
      const before =
        build.label === "" && plan.before ? stat(`${variant.key} [before]`, variant, " [before]") : undefined
      const vsBefore =
        before && before.list.length > 0 && !isDrain
          ? `; vs before: CPU ${(s.cpu / before.cpu).toFixed(2)}×, lines/s ${(s.lineRate / before.lineRate).toFixed(2)}×, lines per CPU-s ${(s.linesPerCpuSecond / before.linesPerCpuSecond).toFixed(2)}×`
          : ""
      if (variant.stream === "none") {
        const wall = median(s.list.map((r) => r.ms))
        const cpu = median(s.list.map((r) => r.cpuMs))
        rows.push({
          bench: "1 throughput",
          case: `${variant.name}${build.label}`,
          figure: `${cpu.toFixed(1)} ms CPU, ${wall.toFixed(1)} ms wall`,
          baseline: "–",
          ratio: 1,
          target: "– (taken off every stream row above)",
          met: undefined,
          ...timedRow(s.list, key, build.src),
        })
        continue
      }
      if (variant.stream === "human") {
        const wall = median(s.list.map((r) => r.ms))
        const baseWall = median(base.list.map((r) => r.ms))
        const share = median(s.list.map((r) => r.cpuMs / r.ms))
        const cap = s.list[0]?.outputCpuShare
        rows.push({
          bench: "1 throughput",
          case: `${variant.name}${isDrain ? "" : `, output_cpu_share ${cap ?? "– (none in this build)"}`}${build.label}`,
          figure: `${(wall / 1000).toFixed(2)} s wall; ${(share * 100).toFixed(1)} % of one core (CPU time / wall time)`,
          baseline: isDrain ? "–" : `${(baseWall / 1000).toFixed(2)} s wall (drain)`,
          ratio: isDrain ? 1 : wall / baseWall,
          target: isDrain ? "–" : "never slowed: wall ≤ 1.05× drain",
          met: isDrain || build.label !== "" ? undefined : wall <= 1.05 * baseWall,
          ...timedRow(s.list, key, build.src),
        })
        continue
      }
      const target = isDrain
        ? "–"
        : variant.cpuTarget !== undefined
          ? `CPU ≤ ${variant.cpuTarget}× drain; MB/s ≥ 0.5× (aim)`
          : variant.key === "yes"
            ? "lines per CPU-s ≥ 3× before"
            : "–"
      // Held to output_cpu_share, a flood's lines/s is bounded by design: the flood-throughput
      // target on `yes` is kept per CPU-second.
      const lineTargetMet =
        variant.key === "yes" && before ? s.linesPerCpuSecond >= 3 * before.linesPerCpuSecond : undefined
      const met =
        isDrain || build.label !== ""
          ? undefined
          : variant.cpuTarget !== undefined
            ? cpuRatio <= variant.cpuTarget
            : lineTargetMet
      rows.push({
        bench: "1 throughput",
        case: `${variant.name}${build.label}${variant.stream === "mixed" ? `, ${(file.bytes / MB).toFixed(0)} MB mixed` : `, ${yesBytes / MB} MB`}`,
        figure:
          `${(s.cpu).toFixed(2)} CPU-s/GB; ${formatBytesPerSecond(s.rate)}, ${formatCount(s.lineRate)} lines/s` +
          (key === drainVariant.key ? "" : ` (${rateRatio.toFixed(2)}× the bare drain's MB/s)`) +
          `; ${(median(s.list.map((r) => r.cpuMs / r.ms)) * 100).toFixed(0)} % of a core` +
          vsBefore +
          vsLineDrain +
          `; with the fixed cost: ${s.grossCpu.toFixed(2)} CPU-s/GB, ${formatBytesPerSecond(s.grossRate)}` +
          (key === drainVariant.key ? "" : ` (${(s.grossRate / base.grossRate).toFixed(2)}×)`),
        baseline:
          key === drainVariant.key
            ? "–"
            : `${base.cpu.toFixed(2)} CPU-s/GB, ${formatBytesPerSecond(base.rate)} (bare drain)`,
        ratio: key === drainVariant.key ? 1 : cpuRatio,
        target,
        met,
        ...(variant.cpuTarget !== undefined && met !== undefined
          ? { verdict: `CPU ${met ? "yes" : "**NO**"}, MB/s aim ${rateRatio >= 0.5 ? "yes" : "**NO**"}` }
          : {}),
        stallMs: median(s.list.map((r) => r.stall.maxGapMs)),
        stallWorstMs: Math.max(...s.list.map((r) => r.stall.maxGapMs)),
        runs: s.list.length,
        detail: {
          key,
          pattern: variant.pattern ?? null,
          src: build.src ?? "this tree",
          cpuSecondsPerGB: s.list.map(cpuPerGB),
          outputCpuShare: s.list[0]?.outputCpuShare ?? null,
          ms: s.list.map((r) => r.ms),
          grossMs: s.gross.map((r) => r.ms),
          grossCpuMs: s.gross.map((r) => r.cpuMs),
          lines: s.list.map((r) => r.lines),
          batches: s.list.map((r) => r.batches),
          stall: s.list.map((r) => r.stall),
        },
      })
    }
  }
  if (plan.before) rows.push(...perCpuRows(runs, file.bytes, yesBytes))
  return rows
}

/**
 * Bytes and lines per CPU-second of every monitor row against the `--before` build, same run (net
 * of each build's fixed cost): what the one line path and the share cap cost per GB read.
 */
function perCpuRows(runs: Runs, mixedBytes: number, yesBytes: number): Row[] {
  const rows: Row[] = []
  for (const variant of VARIANTS) {
    if (variant.mode !== "monitor" || variant.outputCpuShare !== undefined) continue
    if (variant.stream !== "mixed" && variant.stream !== "yes") continue
    const now = statOf(runs, variant.key, variant)
    const before = statOf(runs, `${variant.key} [before]`, variant, " [before]")
    const bytesRatio = before.cpu / now.cpu
    const linesRatio = now.linesPerCpuSecond / before.linesPerCpuSecond
    const size = variant.stream === "mixed" ? `${(mixedBytes / MB).toFixed(0)} MB mixed` : `${yesBytes / MB} MB`
    const perCpu = (s: ReturnType<typeof statOf>) =>
      `${formatBytesPerSecond(GB / s.cpu)} and ${formatCount(s.linesPerCpuSecond)} lines per CPU-s (${s.cpu.toFixed(2)} CPU-s/GB)`
    const target = variant.perCpuTarget
    rows.push({
      bench: "1 throughput per CPU-s",
      case: `${variant.name}, ${size}: bytes (and lines) per CPU-second vs before`,
      figure: `${perCpu(now)}; lines per CPU-s ${linesRatio.toFixed(2)}× before`,
      baseline: `${perCpu(before)} [before]`,
      ratio: bytesRatio,
      target: target === undefined ? "–" : `≥ ${target}× before (bytes and lines)`,
      met: target === undefined ? undefined : bytesRatio >= target && linesRatio >= target,
      stallMs: median(now.list.map((r) => r.stall.maxGapMs)),
      stallWorstMs: Math.max(...now.list.map((r) => r.stall.maxGapMs)),
      runs: now.list.length,
      detail: { key: variant.key, bytesRatio, linesRatio, cpuSecondsPerGB: now.cpu, beforeCpuSecondsPerGB: before.cpu },
    })
  }
  return rows
}
