// test-runner: about 7 s (scripts/test.ts deals the unit files into two jobs by it)
// Escape after exit: a daemon that leaves the session and group while its leader returns at once
// keeps the monitor's token. It is found, stopped and named before the status says `exited`.
// Real processes. ESCAPE_RUNS=N runs each shape N times (the figure in docs/security.md).
import { afterAll, describe, expect, test } from "bun:test"
import { spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { formatStatus, type MonitorStatus } from "../src/codec"
import { defaultMonitorConfig } from "../src/config"
import { MonitorManager } from "../src/manager"
import { createProcessTable, type ProcessTable } from "../src/process/process-table"
import { liveProcesses, waitFor } from "./support/processes"
import { startMonitor } from "./support/start"
import { BACK_ENDS } from "./support/tables"

const TOKEN = "OPENCODE_MONITOR_TOKEN"
const work = mkdtempSync(join(tmpdir(), "omo-escape-"))
const RUNS = Number(process.env.ESCAPE_RUNS ?? 2)
const survivors: string[] = []
afterAll(() => {
  // Whatever a failed run left behind, by the marker only this file uses.
  for (const row of survivors) {
    try {
      process.kill(Number(row.trim().split(/\s+/)[0]), "SIGKILL")
    } catch {}
  }
  rmSync(work, { recursive: true, force: true })
})

// The daemon is `sleep <n>` with an n of its own, which the process table is searched for.
const SHAPES: [string, (n: number) => string][] = [
  ["setsid … &", (n) => `setsid sleep ${n} >/dev/null 2>&1 &`],
  ["setsid sh -c 'exec …' & with a log file", (n) => `setsid sh -c 'exec sleep ${n}' </dev/null >${work}/d.log 2>&1 &`],
  ["perl setpgrp", (n) => `perl -e 'setpgrp(0,0); exec "sleep", "${n}"' >/dev/null 2>&1 &`],
  [
    "Popen(start_new_session=True)",
    (n) =>
      `python3 -c "import subprocess; subprocess.Popen(['sleep','${n}'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"`,
  ],
]

describe("escapes after a natural exit", () => {
  for (const [name, command] of SHAPES) {
    test(
      `${name}: the daemon is stopped and named before the status says exited (${RUNS} runs)`,
      async () => {
        const ended = new Map<string, MonitorStatus>()
        const m = new MonitorManager(
          { ...defaultMonitorConfig(), kill_grace_ms: 300 },
          { onBatch() {}, onEnded: (info) => ended.set(info.id, info.status) },
        )
        const outcomes: string[] = []
        for (let run = 0; run < RUNS; run++) {
          const n = 1_000_000 + Math.floor(Math.random() * 8_999_999)
          const marker = `sleep ${n}`
          const info = await startMonitor(m, { sessionID: "s", directory: work, command: command(n) })
          expect(await waitFor(() => ended.has(info.id), 15_000)).toBe(true)
          // When the status exists the daemon is already gone: no wait after the end.
          const left = liveProcesses(marker)
          survivors.push(...left)
          const status = ended.get(info.id) as MonitorStatus & { leftBehind?: { name: string }[] }
          // Named by pid (its name is `sleep`, or `setsid`/`sh` when caught before its exec).
          const named = (status.leftBehind?.length ?? 0) > 0 ? "named" : "unnamed"
          outcomes.push(`${status.kind}:${left.length === 0 ? "gone" : "ALIVE"}:${named}`)
        }
        await m.shutdown()
        console.log(`${name}: ${outcomes.join(" ")}`)
        expect(outcomes).toEqual(Array.from({ length: RUNS }, () => "exited:gone:named"))
      },
      30_000 + RUNS * 3_000,
    )
  }

  test("the token search runs twice, 50 ms apart: a daemon the first one misses is stopped and named", async () => {
    // A table whose first token search misses (the daemon mid-exec) and that never shows a
    // child, so neither tracking nor the group can find the daemon: only the second search can.
    const real = createProcessTable("proc")
    const searches: { startedAt: number; endedAt: number }[] = []
    const table: ProcessTable = Object.assign(Object.create(real), {
      cheap: { read: real.cheap?.read, childrenOf: () => [] },
      async findByEnvironment(entry: string) {
        const search = { startedAt: performance.now(), endedAt: 0 }
        searches.push(search)
        const found = searches.length === 1 ? { found: [], unreadable: [] } : await real.findByEnvironment(entry)
        search.endedAt = performance.now()
        return found
      },
    })
    const ended = new Map<string, MonitorStatus>()
    const m = new MonitorManager(
      { ...defaultMonitorConfig(), kill_grace_ms: 300 },
      { onBatch() {}, onEnded: (info) => ended.set(info.id, info.status), processTable: table },
    )
    const marker = `sleep ${1_000_000 + Math.floor(Math.random() * 8_999_999)}`
    try {
      const info = await startMonitor(m, {
        sessionID: "s",
        directory: work,
        command: `setsid ${marker} >/dev/null 2>&1 &`,
      })
      expect(await waitFor(() => ended.has(info.id), 15_000)).toBe(true)
      const status = ended.get(info.id) as MonitorStatus & { leftBehind?: { name: string }[] }
      expect(status.leftBehind?.map((p) => p.name)).toEqual(["sleep"])
      expect(liveProcesses(marker)).toEqual([])
      const [first, second] = searches
      expect((second?.startedAt ?? 0) - (first?.endedAt ?? Infinity)).toBeGreaterThanOrEqual(50)
    } finally {
      survivors.push(...liveProcesses(marker))
      await m.shutdown()
    }
  }, 20_000)

  test.each(BACK_ENDS)(
    "a daemon with 180 KB of environment before the token is stopped and named (%s), or the status says it could not be searched",
    async (name, table) => {
      const ended = new Map<string, MonitorStatus>()
      const m = new MonitorManager(
        { ...defaultMonitorConfig(), kill_grace_ms: 300 },
        { onBatch() {}, onEnded: (info) => ended.set(info.id, info.status), processTable: table },
      )
      const marker = `sleep ${1_000_000 + Math.floor(Math.random() * 8_999_999)}`
      const pad = (c: string) => `$(head -c 90000 /dev/zero | tr '\\0' ${c})`
      try {
        const info = await startMonitor(m, {
          sessionID: "s",
          directory: work,
          // env(1) puts the token back last, after the two variables, whatever order the shell keeps.
          command: `env -u ${TOKEN} A=${pad("a")} B=${pad("b")} ${TOKEN}=$${TOKEN} setsid ${marker} >/dev/null 2>&1 </dev/null &`,
        })
        expect(await waitFor(() => ended.has(info.id), 15_000)).toBe(true)
        const status = ended.get(info.id) as MonitorStatus & { leftBehind?: { pid: number }[]; unsearched?: number[] }
        const daemon = liveProcesses(marker).map((row) => Number(row.trim().split(/\s+/)[0]))
        survivors.push(...liveProcesses(marker))
        if (name === "/proc") {
          expect(status.leftBehind?.length).toBe(1)
          expect(daemon).toEqual([])
        } else {
          // procps ends the daemon's row at 128 KiB, before the token: never a clean `exited (code=0)`.
          expect(daemon).toHaveLength(1)
          expect(status.unsearched).toContain(daemon[0] as number)
          // Under load the leader and `env`, whose rows are as long, may still be there and listed too.
          expect(formatStatus(status)).toMatch(
            new RegExp(`could not read the whole environment of pid (\\d+, )*${daemon[0]}\\b`),
          )
        }
      } finally {
        await m.shutdown()
      }
    },
    30_000,
  )

  test("python3 and perl are there (the shapes above need them)", () => {
    expect(spawnSync("python3", ["-c", "print(1)"]).status).toBe(0)
    expect(spawnSync("perl", ["-e", "print 1"]).status).toBe(0)
  })
})
