/**
 * `--only=state`: the cost of the restart-safe state record on the server's event loop. The
 * writer replaces its file synchronously (temp + rename) at most ~4 times a second; this measures
 * one such flush for a typical record and for the largest record the bounds allow, against the
 * bare atomic replace of a one-byte file in the same folder, same run.
 */
import { mkdtempSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { defaultMonitorConfig } from "../../opencode-monitor/src/config.ts"
import type { MonitorInfo } from "../../opencode-monitor/src/manager.ts"
import type { Scheduler } from "../../opencode-monitor/src/scheduler.ts"
import {
  STATE_LAST_LINES,
  STATE_LINE_TEXT_MAX,
  STATE_MAX_MONITORS,
  type StateLine,
  stateEntry,
} from "../../opencode-monitor/src/state/format.ts"
import { MonitorStateWriter } from "../../opencode-monitor/src/state/writer.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { formatMs, median } from "./stats.ts"

const FLUSHES_PER_RUN = 200

/** A monitor the bench edits in place, turned into its record entry on each flush as the manager does. */
type Snapshot = { info: MonitorInfo; pid: number; lastLines: StateLine[] }

/** A clock that runs a timer only when told: each `flush()` is one writer flush, timed alone. */
function manualScheduler() {
  let due: (() => void) | undefined
  const scheduler: Scheduler = {
    now: () => Date.now(),
    setTimeout(callback) {
      due = callback
      return { id: 1 }
    },
    clearTimeout() {
      due = undefined
    },
  }
  return {
    scheduler,
    flush() {
      const callback = due
      due = undefined
      callback?.()
    },
  }
}

function monitors(count: number, lineLength: number): Snapshot[] {
  const config = defaultMonitorConfig()
  return Array.from({ length: count }, (_, i) => {
    const info: MonitorInfo = {
      id: `mon_${i.toString(16).padStart(8, "0")}`,
      sessionID: "ses_bench",
      label: `bench-${i}`,
      cwd: "/tmp",
      pattern: undefined,
      wakePattern: undefined,
      wakeLimit: 0,
      startedAt: Date.now(),
      endedAt: undefined,
      timeoutMs: config.max_runtime_ms,
      status: { kind: "running" },
      ending: undefined,
      counters: {
        total: 0,
        matched: 0,
        unmatched: 0,
        droppedMatched: 0,
        droppedUnmatched: 0,
        bytesDropped: 0,
        lastSeq: 0,
      },
    }
    const lastLines = Array.from({ length: STATE_LAST_LINES }, (_, n) => ({
      stream: "stdout" as const,
      seq: n + 1,
      text: "x".repeat(lineLength),
    }))
    return { info, pid: 100_000 + i, lastLines }
  })
}

/** Median µs of one flush that writes (every flush sees new output), and the file's size. */
function timeFlushes(root: string, snapshot: Snapshot[]): { us: number; bytes: number } {
  const { scheduler, flush } = manualScheduler()
  const writer = new MonitorStateWriter({
    directory: join(root, "project"),
    source: () => snapshot.map((m) => stateEntry(m.info, m, m.lastLines)),
    scheduler,
    log: { warn: () => {} },
    env: { XDG_STATE_HOME: root },
    server: { pid: 1, pidStartTime: "1" },
  })
  writer.changed()
  flush()
  const times: number[] = []
  for (let i = 0; i < FLUSHES_PER_RUN; i++) {
    for (const m of snapshot) m.info.counters.total++
    writer.changed()
    const t = performance.now()
    flush()
    times.push((performance.now() - t) * 1000)
  }
  const bytes = statSync(writer.path).size
  writer.dispose()
  return { us: median(times), bytes }
}

function timeBareReplace(root: string): number {
  const path = join(root, "bare.json")
  const times: number[] = []
  for (let i = 0; i < FLUSHES_PER_RUN; i++) {
    const t = performance.now()
    writeFileSync(`${path}.tmp`, "x")
    renameSync(`${path}.tmp`, path)
    times.push((performance.now() - t) * 1000)
  }
  return median(times)
}

export async function benchState(plan: Plan): Promise<Row[]> {
  const cases = [
    { name: "3 running monitors, 5 last lines of 80 chars each (typical)", count: 3, lineLength: 80 },
    {
      name: `largest record the bounds allow: ${STATE_MAX_MONITORS} monitors × ${STATE_LAST_LINES} lines × ${STATE_LINE_TEXT_MAX} chars`,
      count: STATE_MAX_MONITORS,
      lineLength: STATE_LINE_TEXT_MAX,
    },
  ]
  const runs = cases.map(() => [] as { us: number; bytes: number; baseUs: number }[])
  for (let rep = 0; rep < plan.reps; rep++) {
    const root = mkdtempSync(join(tmpdir(), "omo-bench-state-"))
    try {
      cases.forEach((c, i) => {
        const baseUs = timeBareReplace(root)
        runs[i]?.push({ ...timeFlushes(root, monitors(c.count, c.lineLength)), baseUs })
      })
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
    log(`state rep ${rep + 1}/${plan.reps}`)
  }
  return cases.map((c, i) => {
    const r = runs[i] ?? []
    const us = median(r.map((x) => x.us))
    const baseUs = median(r.map((x) => x.baseUs))
    const bytes = median(r.map((x) => x.bytes))
    return {
      bench: "6 state record",
      case: `one writer flush (snapshot, JSON, temp file + rename), ${c.name}; file ${(bytes / 1024).toFixed(1)} KB`,
      figure: `${formatMs(us / 1000)} per flush`,
      baseline: `${formatMs(baseUs / 1000)} (bare temp + rename of 1 byte)`,
      ratio: us / baseUs,
      target: "≤ 4 flushes/s by design; no target",
      met: undefined,
      stallMs: Number.NaN,
      stallWorstMs: Number.NaN,
      runs: r.length,
      detail: { runs: r },
    }
  })
}
