// test-runner: about 49 s (scripts/test.ts starts the longest first)
/**
 * Escapees: a daemon that double-forks out of the monitor's process group and session is stopped
 * with the monitor in a real opencode serve, (a) when the session is deleted and (b) when the
 * server is SIGKILLed (only the plugin's watchdog is left to act). Each case starts a monitor
 * whose command daemonizes a `sleep` through a classic double fork (the middle process exits at
 * once) and keeps running itself. Each case runs with the process table the server picks (/proc
 * here) and forced to its `ps` back end (src/ps-plugin.ts), the path of a system without /proc:
 * (a) once each, (b) with a project of each on the one server. About 30 s idle, up to ~80 s under load.
 */
import { describe, expect, test } from "bun:test"
import { type LiveProject, PROCESS_TABLES } from "../src/monitor-qa.ts"
import { explained, explainedAll, liveProcesses, planPrompt, signalServer, waitForProcess } from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { waitFor, waitForIdle } from "../src/timeline.ts"

// One server for every case, each process table a project of it; (b), the last, SIGKILLs it.
const shared = serverPerFile()

const KILL_GRACE_MS = 500
const BOUND_MS = KILL_GRACE_MS + 3000

async function startDaemonizingMonitor(live: LiveProject, name: string) {
  const tag = `live-qa-escape-${name}-${process.pid}-${Date.now()}`
  const sessionID = await live.newSession()
  const command = `setsid sh -c 'sh -c "sleep 1000; : ${tag}-daemon" & exit 0' </dev/null >/dev/null 2>&1 & sleep 1000 # ${tag}-leader`
  await live.prompt(
    sessionID,
    planPrompt("Start the daemon.", [["monitor_start", { command, label: "daemon" }]], "Started."),
  )
  const groups = await waitForProcess(`${tag}-leader`, "the monitor to run")
  // The leader's own command line names the daemon's marker too; the daemon is the `sh -c sleep`.
  const daemon = () => liveProcesses(`${tag}-daemon`).filter((e) => e.command.startsWith("sh -c sleep 1000"))
  await waitFor(() => (daemon().length > 0 ? true : undefined), 15_000, 50, "the daemon to run")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  // It really left: another process group than the monitor's.
  expect(daemon().length).toBe(1)
  expect(daemon().every((e) => !groups.has(e.pgid))).toBe(true)
  return { tag, sessionID, groups }
}

describe.each(PROCESS_TABLES)("with the process table through %s", (_table, pluginSpec) => {
  test("escape (a): session.delete stops a double-forked daemon of the monitor", async () => {
    const live = await shared.project({ pluginSpec, pluginOptions: { kill_grace_ms: KILL_GRACE_MS } })
    const { tag, sessionID, groups } = await startDaemonizingMonitor(live, "delete")
    const deletedAt = Date.now()
    const deleted = await live.server.client.session.delete({ path: { id: sessionID } })
    expect(deleted.error).toBeUndefined()
    await explained(live, { deleted: sessionID }, async () => {
      await waitFor(
        () => liveProcesses(tag, groups).length === 0,
        BOUND_MS,
        25,
        "monitor and daemon to stop after session.delete",
      )
      console.log(`[escape] session.delete → daemon and monitor gone in ${Date.now() - deletedAt} ms`)
      const ended = live.pluginLog().filter((line) => line.includes('"monitor ended"'))
      expect(ended.join("\n")).not.toContain("still running after SIGKILL")
    })
  }, 90_000)
})

/** A process table's project on the file's server, running the daemonizing monitor. */
type Run = { table: string; live: LiveProject } & Awaited<ReturnType<typeof startDaemonizingMonitor>>

// The file's last test: it SIGKILLs the file's server, a project of each process table on it.
test("escape (b): a SIGKILL of the server still stops the double-forked daemon (watchdog), with either process table", async () => {
  const runs: Run[] = []
  for (const [table, pluginSpec] of PROCESS_TABLES) {
    const live = await shared.project({ pluginSpec, pluginOptions: { kill_grace_ms: KILL_GRACE_MS } })
    runs.push({ table, live, ...(await startDaemonizingMonitor(live, `sigkill-${table.replace("/", "")}`)) })
  }
  const killed = await signalServer(
    runs.map((r) => r.live),
    "SIGKILL",
  )
  const killedAt = killed.at
  await explainedAll(runs, async () => {
    await killed.died()
    // Side by side: each table's watchdog acts on its own.
    await Promise.all(
      runs.map(async ({ table, tag, groups }) => {
        await waitFor(
          () => liveProcesses(tag, groups).length === 0,
          BOUND_MS,
          25,
          `the ${table} monitor and daemon to stop after the server's SIGKILL`,
        )
        console.log(`[escape] ${table}: SIGKILL of the server → daemon and monitor gone in ${Date.now() - killedAt} ms`)
      }),
    )
  })
}, 90_000)
