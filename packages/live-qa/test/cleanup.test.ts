// test-runner: about 67 s (scripts/test.ts starts the longest first)
/**
 * Scenario 8: no monitored process outlives what owns it. (a) Deleting the session stops its
 * monitors; (b) POST /instance/dispose stops everything; (c) a SIGTERM to the opencode server
 * alone (not its group: opencode runs no dispose on signals) still leaves nothing behind,
 * because the plugin stops its own groups. Each case runs a plain command and one that ignores
 * SIGTERM, so the SIGKILL after kill_grace_ms is exercised too. Every case runs with the process
 * table the server picks (/proc here) and forced to its `ps` back end (src/ps-plugin.ts), the path
 * of a system without /proc: (a) and (b) once each, (c) with a project of each on the one server.
 */
import { describe, expect, test } from "bun:test"
import { type LiveProject, PROCESS_TABLES } from "../src/monitor-qa.ts"
import { psAll } from "../src/process-group.ts"
import { explained, explainedAll, liveProcesses, planPrompt, signalServer, waitForProcess } from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { waitFor, waitForIdle } from "../src/timeline.ts"

// One server for every case, each process table a project of it; (c), the last, SIGTERMs it.
const shared = serverPerFile()

const KILL_GRACE_MS = 500
const BOUND_MS = KILL_GRACE_MS + 2000

/** Starts two long monitors in a new session (one ignores SIGTERM); returns their process groups. */
async function startTwoMonitors(live: LiveProject, name: string) {
  const tag = `live-qa-${name}-${process.pid}-${Date.now()}`
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Keep these running.",
      [
        // `; :` keeps the tag in the shell's argv: bash execs a lone (or last) command, dropping a comment.
        ["monitor_start", { command: `sleep 1000; : ${tag}-plain`, label: "plain" }],
        ["monitor_start", { command: `trap "" TERM; sleep 1000; : ${tag}-stubborn`, label: "stubborn" }],
      ],
      "Both are running.",
    ),
  )
  const groups = new Set([
    ...(await waitForProcess(`${tag}-plain`, "the plain monitor to run")),
    ...(await waitForProcess(`${tag}-stubborn`, "the stubborn monitor to run")),
  ])
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  // Each group holds the shell and its sleep.
  expect(liveProcesses(tag, groups).length).toBeGreaterThanOrEqual(4)
  return { tag, sessionID, groups }
}

/** Bounded wait until nothing of the monitors runs; the time it took. */
async function goneWithin(
  tag: string,
  groups: Set<number>,
  since: number,
  boundMs: number,
  what: string,
): Promise<number> {
  await waitFor(() => liveProcesses(tag, groups).length === 0, boundMs, 25, what)
  return Date.now() - since
}

/** Bounded wait for the plugin to log the end of both monitors, stopped for this reason. */
function endedLines(live: LiveProject, stoppedBy: string): Promise<string[]> {
  const pattern = new RegExp(`"monitor ended".*status=stopped ending.reason=stop ending.by=${stoppedBy}`)
  return waitFor(
    () => {
      const lines = live.pluginLog().filter((line) => pattern.test(line))
      return lines.length === 2 ? lines : undefined
    },
    BOUND_MS,
    25,
    `two "monitor ended" lines ended by ${stoppedBy}`,
  )
}

describe.each(PROCESS_TABLES)("with the process table through %s", (_table, pluginSpec) => {
  test("cleanup (a) session.delete, then (b) POST /instance/dispose: monitors stop within kill_grace_ms + 2 s", async () => {
    // One server for both: the deleted session's monitors, then a fresh session's at dispose.
    const live = await shared.project({ pluginSpec, pluginOptions: { kill_grace_ms: KILL_GRACE_MS } })

    // (a) Deleting the session stops its monitors.
    const deleting = await startTwoMonitors(live, "delete")
    const deletedAt = Date.now()
    const deleted = await live.server.client.session.delete({ path: { id: deleting.sessionID } })
    expect(deleted.error).toBeUndefined()
    await explained(live, { deleted: deleting.sessionID }, async () => {
      const took = await goneWithin(
        deleting.tag,
        deleting.groups,
        deletedAt,
        BOUND_MS,
        "the monitors to stop after session.delete",
      )
      console.log(`[cleanup] session.delete → no monitored process left in ${took} ms`)
      await endedLines(live, "session")
      // The owner is gone, so nothing is sent anywhere.
      expect(live.pluginLog().join("\n")).not.toContain("sent monitor output")
    })

    // (b) Disposing the instance stops every monitor.
    const disposing = await startTwoMonitors(live, "dispose")
    const { url, directory } = live.server
    const disposedAt = Date.now()
    const response = await fetch(`${url}/instance/dispose?directory=${encodeURIComponent(directory)}`, {
      method: "POST",
      headers: { "x-opencode-directory": encodeURIComponent(directory) },
      signal: AbortSignal.timeout(BOUND_MS + 5000),
    })
    await response.body?.cancel()
    const answeredIn = Date.now() - disposedAt
    await explained(live, { disposed: disposing.sessionID }, async () => {
      expect(response.ok).toBe(true)
      // opencode answers before its plugins' dispose hooks have finished, so this is a bounded wait.
      const took = await goneWithin(
        disposing.tag,
        disposing.groups,
        disposedAt,
        BOUND_MS,
        "the monitors to stop after dispose",
      )
      console.log(`[cleanup] dispose answered in ${answeredIn} ms; no monitored process left after ${took} ms`)
      await endedLines(live, "shutdown")
      expect((await live.stop()).leftovers).toEqual([])
    })
  }, 90_000)
})

/** A process table's project on the file's server, running two monitors (see startTwoMonitors). */
type Run = { table: string; pluginSpec: string | undefined; live: LiveProject } & Awaited<
  ReturnType<typeof startTwoMonitors>
>

// The file's last test: it SIGTERMs the file's server, a project of each process table on it.
test("cleanup (c): SIGTERM to the server process alone leaves no monitored process behind, with either process table", async () => {
  const runs: Run[] = []
  for (const [table, pluginSpec] of PROCESS_TABLES) {
    const live = await shared.project({ pluginSpec, pluginOptions: { kill_grace_ms: KILL_GRACE_MS } })
    runs.push({ table, pluginSpec, live, ...(await startTwoMonitors(live, `sigterm-${table.replace("/", "")}`)) })
  }
  const watchdogs = (groups: Set<number>) =>
    psAll().filter(
      (e) =>
        !e.stat.startsWith("Z") &&
        e.command.includes("opencode-monitor-watchdog") &&
        [...groups].some((g) => e.command.includes(` ${g} `)),
    )
  for (const { pluginSpec, groups } of runs) {
    expect(watchdogs(groups)).toHaveLength(2)
    // The back end in effect shows in the watchdog's script: it reads /proc, or it runs ps.
    for (const watchdog of watchdogs(groups))
      expect(watchdog.command).toContain(pluginSpec ? "ps -o lstart=" : "/proc/")
  }

  const killed = await signalServer(
    runs.map((r) => r.live),
    "SIGTERM",
  )
  const killedAt = killed.at
  await explainedAll(runs, async () => {
    await killed.died()
    // Side by side: each table's time is its own, from the signal.
    await Promise.all(
      runs.map(async ({ table, tag, groups }) => {
        const took = await goneWithin(tag, groups, killedAt, BOUND_MS, `the ${table} monitors to stop after SIGTERM`)
        console.log(`[cleanup] ${table}: SIGTERM to the server → no monitored process left in ${took} ms`)
        expect(took).toBeLessThanOrEqual(BOUND_MS)
      }),
    )
    // The watchdogs finish too (each sleeps the grace, sends SIGKILL, exits).
    for (const { groups } of runs)
      await waitFor(() => watchdogs(groups).length === 0, BOUND_MS, 25, "the watchdogs to exit")
    const report = await shared.stop()
    // The plugin did not change how the server reacts to SIGTERM: it died of it.
    expect(report.signalCode).toBe("SIGTERM")
    expect(report.disposeOk).toBe(false)
    expect(report.leftovers).toEqual([])
    for (const { tag, groups } of runs) expect(liveProcesses(tag, groups)).toEqual([])
  })
}, 90_000)
