import { spawn } from "node:child_process"
import { writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { compileLineFilter, type LineFilter } from "../../opencode-monitor/src/pipeline/filter.ts"
import { drain, monitorOnce, type RunResult } from "./harness.ts"
import { log, type Plan } from "./plan.ts"
import { type ContrastKind, contrastCase } from "./regex-cases.ts"
import type { Row } from "./report.ts"
import { StallMeter, type StallReport } from "./stall-meter.ts"
import { formatBytesPerSecond, formatMs, median } from "./stats.ts"
import { shellQuote } from "./streams.ts"

const LITERAL = "error"
const LINE_BYTES = 8192

type Adversary = { pattern: string; input: (length: number) => string; why: string }

/** Each adversarial pattern with the input that is worst for a backtracking engine. */
const ADVERSARIES: Adversary[] = [
  { pattern: ".*.*.*x", input: (n) => "a".repeat(n), why: "cubic backtracking, no x" },
  { pattern: "(a|a)*b", input: (n) => "a".repeat(n), why: "exponential alternation, no b" },
  { pattern: "(\\w|\\d)+$", input: (n) => `${"1".repeat(n - 1)}!`, why: "overlapping classes, fails at the end" },
  { pattern: "^(a?){25}a{25}$", input: (n) => "a".repeat(n), why: "nested optional, 75-state NFA" },
]

type Timing = { perLineMs: number; stall: StallReport }

/**
 * Per-line match time of `filter` on `line`: lines are matched in synchronous batches of ~1 ms
 * (so sub-microsecond matches are timed accurately), yielding to the event loop between batches
 * so the stall meter sees how long the matching itself blocks.
 */
async function timeFilter(filter: LineFilter, line: string, minMs: number): Promise<Timing> {
  // Calibrate a batch size that takes about 1 ms.
  let batch = 1
  for (;;) {
    const t = performance.now()
    for (let i = 0; i < batch; i++) filter(line)
    if (performance.now() - t >= 1 || batch >= 1 << 20) break
    batch *= 2
  }
  const meter = new StallMeter().start()
  let spent = 0
  let lines = 0
  const wallStart = performance.now()
  while (spent < minMs && performance.now() - wallStart < minMs * 20) {
    const t = performance.now()
    for (let i = 0; i < batch; i++) filter(line)
    spent += performance.now() - t
    lines += batch
    await new Promise<void>((resolve) => setImmediate(resolve))
  }
  return { perLineMs: spent / lines, stall: meter.stop() }
}

async function compile(pattern: string): Promise<LineFilter> {
  const filter = await compileLineFilter(pattern, 512)
  if (!filter) throw new Error(`no filter for ${pattern}`)
  return filter
}

/** Benchmark 3: per-line RE2 match time on 8 KB lines for adversarial patterns vs a literal. */
export async function benchRegex(plan: Plan): Promise<Row[]> {
  log(`regex: ${ADVERSARIES.length} adversarial patterns on ${LINE_BYTES}-byte lines, ${plan.reps} reps`)
  const literal = await compile(LITERAL)
  const rows: Row[] = []
  let worst: { adversary: Adversary; perLineMs: number } | undefined
  for (const adversary of ADVERSARIES) {
    const filter = await compile(adversary.pattern)
    const line = adversary.input(LINE_BYTES)
    const quarter = adversary.input(LINE_BYTES / 4)
    if (Buffer.byteLength(line) !== LINE_BYTES) throw new Error("input is not 8 KB")
    await timeFilter(filter, line, plan.regexMinMs / 4) // warm-up
    await timeFilter(literal, line, plan.regexMinMs / 4)
    const adversarial: Timing[] = []
    const baseline: Timing[] = []
    const short: Timing[] = []
    for (let rep = 0; rep < plan.reps; rep++) {
      baseline.push(await timeFilter(literal, line, plan.regexMinMs))
      adversarial.push(await timeFilter(filter, line, plan.regexMinMs))
      short.push(await timeFilter(filter, quarter, plan.regexMinMs))
    }
    const perLine = median(adversarial.map((t) => t.perLineMs))
    const literalPerLine = median(baseline.map((t) => t.perLineMs))
    const linearity = perLine / median(short.map((t) => t.perLineMs))
    const ratio = perLine / literalPerLine
    if (!worst || perLine > worst.perLineMs) worst = { adversary, perLineMs: perLine }
    log(
      `  ${adversary.pattern}: ${formatMs(perLine)}/line vs literal ${formatMs(literalPerLine)} (${ratio.toFixed(0)}×)`,
    )
    rows.push({
      bench: "3 regex",
      case: `\`${adversary.pattern}\` on 8 KB (${adversary.why}); 8 KB/2 KB time ${linearity.toFixed(1)}× (4× = linear)`,
      figure: `${formatMs(perLine)}/line (${formatBytesPerSecond(LINE_BYTES / (perLine / 1000))})`,
      baseline: `${formatMs(literalPerLine)}/line (literal \`${LITERAL}\`)`,
      ratio,
      target: "≤ 10×",
      met: ratio <= 10,
      stallMs: median(adversarial.map((t) => t.stall.maxGapMs)),
      stallWorstMs: Math.max(...adversarial.map((t) => t.stall.maxGapMs)),
      runs: adversarial.length,
      detail: {
        pattern: adversary.pattern,
        perLineMs: adversarial.map((t) => t.perLineMs),
        literalPerLineMs: baseline.map((t) => t.perLineMs),
        perLineMs2KB: short.map((t) => t.perLineMs),
        linearity8KBvs2KB: linearity,
      },
    })
  }
  if (worst) rows.push(await endToEnd(plan, worst.adversary))
  rows.push(...(await contrast(plan)))
  return rows
}

/**
 * The worst pattern end to end: a child `cat`s 8 KB worst-case lines and the MonitorManager
 * filters them; shows how long the event loop is blocked (pipe chunks hold several such lines).
 */
async function endToEnd(plan: Plan, adversary: Adversary): Promise<Row> {
  const lineCount = plan.quick ? 256 : 1024
  const path = join(tmpdir(), `omo-bench-regex-${lineCount}.log`)
  writeFileSync(path, `${adversary.input(LINE_BYTES)}\n`.repeat(lineCount))
  const command = `cat ${shellQuote(path)}`
  const bytes = lineCount * (LINE_BYTES + 1)
  log(`  end to end: \`${adversary.pattern}\` through MonitorManager, ${lineCount} lines of 8 KB`)
  await monitorOnce(command, { matchPattern: adversary.pattern })
  const drains: RunResult[] = []
  const runs: RunResult[] = []
  for (let rep = 0; rep < plan.reps; rep++) {
    drains.push(await drain(command))
    runs.push(await monitorOnce(command, { matchPattern: adversary.pattern }))
  }
  const rate = median(runs.map((r) => bytes / (r.ms / 1000)))
  const drainRate = median(drains.map((r) => bytes / (r.ms / 1000)))
  return {
    bench: "3 regex",
    case: `end to end: MonitorManager + \`${adversary.pattern}\`, ${lineCount} × 8 KB worst-case lines`,
    figure: formatBytesPerSecond(rate),
    baseline: `${formatBytesPerSecond(drainRate)} (drain)`,
    ratio: rate / drainRate,
    target: "stall ≈ 20 ms (loop gets a turn every few ms)",
    met: median(runs.map((r) => r.stall.maxGapMs)) <= 50,
    stallMs: median(runs.map((r) => r.stall.maxGapMs)),
    stallWorstMs: Math.max(...runs.map((r) => r.stall.maxGapMs)),
    runs: runs.length,
    detail: {
      pattern: adversary.pattern,
      ms: runs.map((r) => r.ms),
      drainMs: drains.map((r) => r.ms),
      stall: runs.map((r) => r.stall),
    },
  }
}

const CONTRAST_CHILD = fileURLToPath(new URL("./regex-contrast-child.ts", import.meta.url))

type Contrast = { n: number; ms: number; killed: boolean }

/** Runs the backtracking RegExp in a child process, SIGKILLed at `capMs`. */
function runContrast(kind: ContrastKind, n: number, capMs: number): Promise<Contrast> {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const child = spawn(process.execPath, [CONTRAST_CHILD, kind, String(n)], { stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    let killed = false
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString()
    })
    const timer = setTimeout(() => {
      killed = true
      child.kill("SIGKILL")
    }, capMs)
    child.once("error", reject)
    child.once("close", () => {
      clearTimeout(timer)
      const line = out.split("\n").find((l) => l.startsWith("CONTRAST_RESULT "))
      if (killed || !line) return resolve({ n, ms: performance.now() - started, killed: true })
      const parsed = JSON.parse(line.slice("CONTRAST_RESULT ".length)) as { ms: number }
      resolve({ n, ms: parsed.ms, killed: false })
    })
  })
}

/**
 * Contrast: JS's built-in RegExp vs the plugin's filter on the same pattern and input, each
 * backtracking run in its own process with a hard time cap.
 */
async function contrast(plan: Plan): Promise<Row[]> {
  const capMs = plan.quick ? 3_000 : 10_000
  const cases: { kind: ContrastKind; n: number }[] = [
    { kind: "nested-optional", n: 20 },
    ...(plan.quick ? [16, 20, 22] : [16, 20, 24, 28]).map((n) => ({ kind: "overlapping-classes" as const, n })),
  ]
  const rows: Row[] = []
  for (const { kind, n } of cases) {
    const { pattern, input, describe } = contrastCase(kind, n)
    const re2 = await compile(pattern)
    const re2Times: number[] = []
    const jsRuns: Contrast[] = []
    for (let rep = 0; rep < plan.reps; rep++) {
      re2Times.push((await timeFilter(re2, input, plan.regexMinMs / 4)).perLineMs)
      const run = await runContrast(kind, n, capMs)
      jsRuns.push(run)
      if (run.killed) break // one kill at the cap is enough evidence; do not burn more time
    }
    const killed = jsRuns.some((r) => r.killed)
    const jsMs = killed ? capMs : median(jsRuns.map((r) => r.ms))
    const re2Ms = median(re2Times)
    log(
      `  contrast ${pattern} n=${n}: JS RegExp ${killed ? `> ${capMs} ms (killed)` : formatMs(jsMs)} vs RE2 ${formatMs(re2Ms)}`,
    )
    rows.push({
      bench: "3 regex (contrast)",
      case: `JS built-in RegExp \`${pattern}\` on ${describe} (child process, hard cap ${capMs / 1000} s)`,
      figure: killed ? `> ${formatMs(capMs)} (killed at cap)` : formatMs(jsMs),
      baseline: `${formatMs(re2Ms)} (plugin filter, same pattern and input)`,
      ratio: jsMs / re2Ms,
      target: "– (contrast only)",
      met: undefined,
      // The backtracking runs in its own process, blocking it for the whole figure; not timer-measured.
      stallMs: Number.NaN,
      stallWorstMs: Number.NaN,
      runs: jsRuns.length,
      detail: { pattern, inputLength: input.length, jsRuns, re2PerMatchMs: re2Times, capMs },
    })
    // Larger inputs of a kind that already hit the cap would only burn time.
    if (killed && kind === "overlapping-classes") break
  }
  return rows
}
