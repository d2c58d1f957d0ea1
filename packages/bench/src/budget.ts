/**
 * Observation budget, live: what a chatty monitor (10 request lines a second) injects
 * into an IDLE session, with the budget effectively off and with the default budget, for one and
 * for three monitors in one session. Measured over a few minutes on real `opencode serve`s (one
 * per side, both at once), then extrapolated to an hour.
 */
import { type MonitorQA, startMonitorQA } from "../../live-qa/src/monitor-qa.ts"
import { waitFor } from "../../live-qa/src/timeline.ts"
import { defaultMonitorConfig } from "../../opencode-monitor/src/config.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0)
const NO_STALL = { stallMs: Number.NaN, stallWorstMs: Number.NaN }
const LINES_PER_SECOND = 10
// Budget "off": every limit far beyond what a few minutes of 10 lines/s can reach.
const BUDGET_OFF = {
  observation_bytes_per_minute: 1_000_000_000,
  observation_burst_bytes: 1_000_000_000,
  observation_session_bytes: 1_000_000_000,
}

const chattyCommand = (seconds: number, name: string) =>
  `i=0; while [ $i -lt ${seconds * LINES_PER_SECOND} ]; do i=$((i+1)); echo "127.0.0.1 - - '${name} GET /api/items/$i HTTP/1.1' 200 512 3ms"; if [ $((i % ${LINES_PER_SECOND})) -eq 0 ]; then sleep 1; fi; done; exit 0`

type Measured = {
  monitors: number
  minutes: number
  envelopes: number
  bytes: number
  summaries: number[]
  capReachedMin: number | undefined
}

/** `monitors` chatty monitors for `seconds` in one idle session: the observations it received. */
async function chattySession(
  qa: MonitorQA,
  monitors: number,
  seconds: number,
  sessionBytes: number,
): Promise<Measured> {
  const sessionID = await qa.newSession({ title: `budget ${monitors}` })
  const steps = Array.from(
    { length: monitors },
    (_, i) =>
      `STEP monitor_start ${JSON.stringify({ command: chattyCommand(seconds, `m${i}`), label: `chatty-${i}` })}`,
  )
  const started = Date.now()
  await qa.prompt(sessionID, [...steps, "SAY started"].join("\n"))
  await waitFor(
    async () => (await qa.envelopes(sessionID)).filter((e) => e.status !== "running").length === monitors,
    (seconds + 120) * 1000,
    500,
    "every exit wake",
  )
  const minutes = (Date.now() - started) / 60_000
  const observations = (await qa.envelopes(sessionID)).filter((e) => e.status === "running")
  let running = 0
  let capReachedMin: number | undefined
  for (const e of observations) {
    running += Buffer.byteLength(e.text)
    if (capReachedMin === undefined && running > sessionBytes - 2_048)
      capReachedMin = (e.message.info.time.created - started) / 60_000
  }
  return {
    monitors,
    minutes,
    envelopes: observations.length,
    bytes: running,
    summaries: observations.filter((e) => /^summary: /m.test(e.text)).map((e) => Buffer.byteLength(e.text)),
    capReachedMin,
  }
}

export async function benchBudget(plan: Plan): Promise<Row[]> {
  const seconds = plan.quick ? 60 : 420
  const defaults = defaultMonitorConfig()
  const sides = { off: BUDGET_OFF, on: {} }
  const servers = await Promise.all(Object.values(sides).map((pluginOptions) => startMonitorQA({ pluginOptions })))
  const [off, on] = servers as [MonitorQA, MonitorQA]
  try {
    log(
      `observation budget: ${seconds} s of ${LINES_PER_SECOND} lines/s, 1 and 3 monitors, budget off and on, all at once`,
    )
    const [off1, off3, on1, on3] = await Promise.all([
      chattySession(off, 1, seconds, BUDGET_OFF.observation_session_bytes),
      chattySession(off, 3, seconds, BUDGET_OFF.observation_session_bytes),
      chattySession(on, 1, seconds, defaults.observation_session_bytes),
      chattySession(on, 3, seconds, defaults.observation_session_bytes),
    ])
    const intervalMin = defaults.observation_summary_interval_ms / 60_000
    const row = (m: Measured, budget: "off" | "on"): Row => {
      const linearPerHour = (m.bytes / m.minutes) * 60
      // With the budget: the session total, then (once it is spent) one summary per interval per
      // monitor for the rest of the hour. Summary size as measured, else the smallest envelope seen.
      const summaryBytes = m.summaries.length > 0 ? sum(m.summaries) / m.summaries.length : 700
      const cappedPerHour =
        defaults.observation_session_bytes +
        ((60 - (m.capReachedMin ?? m.minutes)) / intervalMin) * m.monitors * summaryBytes
      const perHour = budget === "off" ? linearPerHour : Math.min(linearPerHour, cappedPerHour)
      log(
        `budget ${budget}, ${m.monitors} monitor(s): ${m.envelopes} envelopes, ${m.bytes} bytes in ${m.minutes.toFixed(1)} min`,
      )
      return {
        bench: "observation budget (live)",
        case: `idle session, ${m.monitors} monitor(s) × ${LINES_PER_SECOND} lines/s, budget ${budget === "off" ? "effectively off (1 GB limits)" : "default (4 KB/min, 16 KB burst, 64 KB/session, summary every 5 min)"}: observations injected, per hour`,
        figure: `${(perHour / 1024).toFixed(0)} KB/h (measured ${(m.bytes / 1024).toFixed(1)} KB in ${m.envelopes} envelopes over ${m.minutes.toFixed(1)} min${m.summaries.length ? `, of which ${m.summaries.length} summaries, ${(sum(m.summaries) / 1024).toFixed(1)} KB` : ""}; ${budget === "off" ? "linear extrapolation" : "session total + summaries for the rest of the hour"})`,
        baseline: "–",
        ratio: Number.NaN,
        target:
          budget === "on"
            ? `≤ ${defaults.observation_session_bytes / 1024} KB + summaries per hour between user turns`
            : "–",
        // Summaries are the one thing past the session total, by design: the rest must fit in it.
        met: budget === "on" ? m.bytes - sum(m.summaries) <= defaults.observation_session_bytes : undefined,
        ...NO_STALL,
        runs: 1,
        detail: { ...m, linearPerHour, cappedPerHour, perHour },
      }
    }
    const rows = [row(off1, "off"), row(on1, "on"), row(off3, "off"), row(on3, "on")]
    const [r0, r1, r2, r3] = rows as [Row, Row, Row, Row]
    r1.baseline = r0.figure.split(" (")[0] as string
    r1.ratio = (r1.detail.perHour as number) / (r0.detail.perHour as number)
    r3.baseline = r2.figure.split(" (")[0] as string
    r3.ratio = (r3.detail.perHour as number) / (r2.detail.perHour as number)
    return rows
  } finally {
    await Promise.all(servers.map((qa) => qa.stop().catch(() => undefined)))
  }
}
