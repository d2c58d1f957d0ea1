/**
 * Bounds figures: `bun packages/bench/src/bounds.ts [memory] [flood] [stop] [escape]` (all when
 * none is named). Prints one markdown table; each row says what it measured and its baseline,
 * taken in the same run.
 */
import { startMonitor } from "./start"
import { spawn, spawnSync } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import type { MonitorConfig } from "../../opencode-monitor/src/config"
import { killWithChildren } from "../../opencode-monitor/test/support/processes"
import type { OutputBatch } from "../../opencode-monitor/src/pipeline/batcher"
import { StallMeter } from "./stall-meter.ts"

// OMO_SRC=<path to another checkout's packages/opencode-monitor/src> measures that build instead
// (how the "before" figures of BENCHMARKS.md were taken, from eb4c8ba, before the bounds).
const src = process.env.OMO_SRC
  ? join(process.cwd(), process.env.OMO_SRC)
  : join(import.meta.dir, "../../opencode-monitor/src")
const { defaultMonitorConfig } = (await import(
  join(src, "config.ts")
)) as typeof import("../../opencode-monitor/src/config")
const { formatMonitorBatch } = (await import(
  join(src, "delivery/envelope.ts")
)) as typeof import("../../opencode-monitor/src/delivery/envelope")
const { MonitorManager } = (await import(
  join(src, "manager.ts")
)) as typeof import("../../opencode-monitor/src/manager")

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const rows: string[] = []
const row = (...cells: (string | number)[]) => rows.push(`| ${cells.join(" | ")} |`)
const MB = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`

function managerWith(overrides: Partial<MonitorConfig>) {
  const batches: OutputBatch[] = []
  const ended = new Map<string, () => void>()
  const done = new Set<string>()
  const manager = new MonitorManager(
    { ...defaultMonitorConfig(), ...overrides },
    {
      onBatch: (b) => batches.push(b),
      onEnded: (info) => {
        done.add(info.id)
        ended.get(info.id)?.()
      },
    },
  )
  const whenEnded = (id: string) =>
    done.has(id) ? Promise.resolve() : new Promise<void>((resolve) => ended.set(id, resolve))
  return { manager, batches, whenEnded }
}

function pidsWith(marker: string): number[] {
  const ps = spawnSync("ps", ["-eo", "pid=,stat=,args="], { encoding: "utf8" })
  return ps.stdout
    .split("\n")
    .filter((r) => r.includes(marker) && !r.includes("ps -eo") && !/^\s*\d+\s+Z/.test(r))
    .map((r) => Number(r.trim().split(/\s+/)[0]))
}

/** The old liveness check (eb4c8ba): every /proc entry read, synchronously, per call. */
function liveGroupMembers(pgid: number): number[] {
  const members: number[] = []
  for (const entry of readdirSync("/proc")) {
    if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "latin1")
    } catch {
      continue
    }
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    if (Number(fields[2]) === pgid && fields[0] !== "Z" && fields[0] !== "X") members.push(Number(entry))
  }
  return members
}

async function memory(): Promise<void> {
  const child = join(import.meta.dir, "../../opencode-monitor/test/support/retention-child.ts")
  const run = (bytes: number, count: number) => {
    const out = spawnSync(process.execPath, [child, "50", "10", "1000", String(bytes), String(count)], {
      encoding: "utf8",
    })
    const line = out.stdout.split("\n").find((l) => l.startsWith("RETENTION_RESULT "))
    if (!line) throw new Error(`retention child failed: ${out.stderr}`)
    return JSON.parse(line.slice("RETENTION_RESULT ".length))
  }
  const budget = run(64 * 1024 * 1024, 100)
  // Baseline: the same run with no server-wide budget (only the old 10-per-session limit).
  const unbounded = run(1e12, 100_000)
  const bound = 64 * 1024 * 1024 + 10 * 2 * 8_192_000 + 32 * 1024 * 1024
  row(
    "server-wide memory",
    "50 sessions × 10 monitors, each a full ring (1000 × 8 KB lines), never deleted; RSS growth after GC, fresh process",
    `${MB(budget.growthBytes)} (${budget.retained.count} retained, ${MB(budget.retained.bytes)})`,
    `${MB(unbounded.growthBytes)} without the budget (${unbounded.retained.count} retained)`,
    `≤ ${MB(bound)} (documented bound)`,
    budget.growthBytes <= bound ? "yes" : "**NO**",
  )
}

async function flood(): Promise<void> {
  const command =
    "for i in 1 2; do head -c 8191 /dev/zero | tr '\\0' '\\f'; echo; done; head -c 8190 /dev/zero | tr '\\0' 'x' | sed 's/x/x\\f/g'"
  for (const batchMax of [16_384, 1_024]) {
    const { manager, batches, whenEnded } = managerWith({ batch_max_bytes: batchMax, kill_grace_ms: 300 })
    const info = await startMonitor(manager, { sessionID: "flood", directory: process.cwd(), command })
    await whenEnded(info.id)
    const envelopes = batches.map((batch) => formatMonitorBatch({ batch, label: info.label }))
    const largest = Math.max(...envelopes.map((e) => Buffer.byteLength(e)))
    const header = Buffer.byteLength(
      formatMonitorBatch({
        batch: { ...batches[0], lines: [], dropped: { matched: 0, unmatched: 0, bytes: 0 } } as OutputBatch,
        label: info.label,
      }),
    )
    const rowsTotal = envelopes.reduce((n, e) => n + e.split("\n").length, 0)
    row(
      "\\f flood envelope",
      `2 lines of 8191 \\f + 1 line "x\\f"×8190, batch_max_bytes ${batchMax}`,
      `largest ${largest} B, ${envelopes.length} envelope(s), ${rowsTotal} rows`,
      "before the fix: one 256 KB envelope of 16,394 rows for the first 16 KB",
      `≤ ${batchMax + header} B (batch_max_bytes + ${header} B header)`,
      largest <= batchMax + header ? "yes" : "**NO**",
    )
    await manager.shutdown()
  }
}

async function stopCost(): Promise<void> {
  // Fill the host to 2,000 processes with sleepers in one group of our own.
  const present = readdirSync("/proc").filter((e) => /^\d+$/.test(e)).length
  const extra = Math.max(0, 2_000 - present - 40)
  const filler = spawn("sh", ["-c", `i=0; while [ $i -lt ${extra} ]; do sleep 600 & i=$((i+1)); done; wait`], {
    detached: true,
    stdio: "ignore",
  })
  while (readdirSync("/proc").filter((e) => /^\d+$/.test(e)).length < present + extra) await sleep(100)
  const total = readdirSync("/proc").filter((e) => /^\d+$/.test(e)).length
  try {
    const measure = async () => {
      const { manager } = managerWith({ kill_grace_ms: 1_000, max_monitors_per_session: 16 })
      const infos = []
      for (let i = 0; i < 16; i++) {
        infos.push(
          await startMonitor(manager, {
            sessionID: "stop",
            directory: process.cwd(),
            command: "trap '' TERM; sleep 1000",
          }),
        )
      }
      await sleep(500)
      const meter = new StallMeter().start()
      await Promise.all(infos.map((info) => manager.stop("stop", info.id, "agent")))
      return meter.stop()
    }
    // Baseline: the old liveness check, a full /proc scan per monitor per 25 ms poll, for the
    // same 1 s grace.
    const old = async () => {
      const meter = new StallMeter().start()
      const until = Date.now() + 1_000
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (Date.now() < until) {
            liveGroupMembers(process.pid)
            await sleep(25)
          }
        }),
      )
      return meter.stop()
    }
    const runs = []
    const olds = []
    for (let i = 0; i < 3; i++) {
      runs.push((await measure()).maxGapMs)
      olds.push((await old()).maxGapMs)
    }
    const worst = Math.max(...runs)
    row(
      "stop cost",
      `stop 16 TERM-ignoring monitors (grace 1 s) on a host with ${total} processes; worst event-loop gap, 3 runs`,
      `${worst.toFixed(0)} ms (runs: ${runs.map((r) => r.toFixed(0)).join(", ")})`,
      `${Math.max(...olds).toFixed(0)} ms with a full scan per monitor per poll`,
      "≤ 50 ms",
      worst <= 50 ? "yes" : "**NO**",
    )
  } finally {
    if (filler.pid) process.kill(-filler.pid, "SIGKILL")
  }
}

async function escapeRate(): Promise<void> {
  const runs = 100
  const cases: [string, (m: string) => string][] = [
    // The classic daemon: fork, setsid, fork again, the middle process exits at once; the
    // daemon closes its output.
    [
      "double fork, middle exits at once, output redirected",
      (m) => `setsid sh -c 'sh -c "sleep 1000; : ${m}" & exit 0' </dev/null >/dev/null 2>&1 & sleep 1000`,
    ],
    // The same daemon keeping the output pipes, started by a leader that exits at once.
    [
      "double fork, keeps the pipes, leader exits at once",
      (m) => `setsid sh -c 'sh -c "sleep 1000; : ${m}" & exit 0' & exit 0`,
    ],
    // setsid with a parent that stays a moment (seen attached).
    [
      "setsid child of a lingering parent",
      (m) => `setsid sh -c 'sh -c "sleep 1000; : ${m}" & sleep 0.2' >/dev/null 2>&1 & sleep 1000`,
    ],
    // The residual: a double fork that also clears its environment.
    [
      "double fork that clears its environment (env -i)",
      (m) => `setsid sh -c 'env -i sh -c "sleep 1000; : ${m}" & exit 0' </dev/null >/dev/null 2>&1 & sleep 1000`,
    ],
  ]
  for (const [name, command] of cases) {
    const { manager, whenEnded } = managerWith({ kill_grace_ms: 300, max_monitors_per_session: 16 })
    let escaped = 0
    let reported = 0
    for (let i = 0; i < runs; i += 10) {
      const batch = await Promise.all(
        Array.from({ length: 10 }, async (_, k) => {
          const marker = `escape_${process.pid}_${i + k}_${Math.random().toString(36).slice(2, 7)}`
          const info = await startMonitor(manager, {
            sessionID: `esc${k}`,
            directory: process.cwd(),
            command: command(marker),
          })
          await sleep(400)
          const stopped = await manager.stop(`esc${k}`, info.id, "agent")
          await whenEnded(info.id)
          const status = (stopped?.info ?? info).status as { survivors?: number[]; pipesHeld?: boolean }
          const left = pidsWith(marker)
          for (const pid of left) killWithChildren(pid)
          return { left: left.length > 0, reported: Boolean(status.survivors?.length || status.pipesHeld) }
        }),
      )
      for (const r of batch) {
        if (r.left) escaped++
        if (r.left && r.reported) reported++
      }
    }
    row(
      "escape rate",
      `${name}, ${runs} runs, stopped after 0.4 s`,
      `${escaped}/${runs} escaped`,
      `${reported} of them reported in the status`,
      "documented",
      "–",
    )
    await manager.shutdown()
  }
}

const wanted = process.argv.slice(2)
const all: Record<string, () => Promise<void>> = { memory, flood, stop: stopCost, escape: escapeRate }
for (const [name, run] of Object.entries(all)) if (wanted.length === 0 || wanted.includes(name)) await run()
console.log("| bench | case | figure | baseline (same run) | target | met |")
console.log("|---|---|---|---|---|---|")
for (const r of rows) console.log(r)
process.exit(0)
