// test-runner: about 78 s (scripts/test.ts starts the longest first)
/**
 * Restart-safe against real `opencode serve` processes on ONE data dir: a
 * monitor runs, the server is SIGKILLed (its process group, as a crash), the watchdog ends the
 * monitored process, a new server starts on the same data and, after one request, the session
 * gets a `Status: lost` wake and a REPORT turn. A third server on the same data reports nothing
 * again. Takes 40–80 s (three server starts and two model turns; longer on a loaded machine).
 */
import { afterAll, afterEach, expect, test } from "bun:test"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { STATE_FORMAT } from "../../opencode-monitor/src/state/format.ts"
import { removeIsolatedDirs } from "../src/isolated-env.ts"
import { exitReport } from "../src/monitor-agent.ts"
import { type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import { explained, liveProcesses, planPrompt, waitForEnvelope, waitForProcess, waitForReply } from "../src/scenario.ts"
import { restartData } from "../src/state-records.ts"
import { sleep, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

const data = restartData("oc-restart-")
const { dirs, stateDir } = data
let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})
afterAll(() => removeIsolatedDirs(dirs))

const PLUGIN_OPTIONS = { kill_grace_ms: 500 }
const LOST = "lost (the opencode server stopped while it ran)"
const stateFiles = data.files
const serverLog = (live: MonitorQA) => live.server.logs.map((line) => line.text)

/**
 * Starts a server on the shared data dir. Its first request, which loads the plugin, is the
 * harness's `GET /event` right after the listening line; then the session is read once more.
 */
async function restart(sessionID: string): Promise<{ live: MonitorQA; requestedAt: number }> {
  const live = await startMonitorQA({ dirs, pluginOptions: PLUGIN_OPTIONS })
  qa = live
  const listening = live.server.logs.find((line) => line.text.includes("opencode server listening"))
  const got = await live.server.client.session.get({ path: { id: sessionID } })
  expect(got.data?.id).toBe(sessionID)
  return { live, requestedAt: listening?.at ?? Date.now() }
}

async function crash(live: MonitorQA): Promise<void> {
  // The event stream breaks with the server: close it first.
  await live.timeline.stop()
  await live.server.crash()
}

test("a monitor cut off by a server crash is reported to its session once, as Status: lost", async () => {
  // 1. A server runs a monitor that prints a line and then sleeps.
  const first = await startMonitorQA({ dirs, pluginOptions: PLUGIN_OPTIONS })
  qa = first
  const tag = `live-qa-restart-${process.pid}-${Date.now()}`
  const sessionID = await first.newSession()
  const promptedAt = await first.prompt(
    sessionID,
    planPrompt(
      "Keep the long job running.",
      [["monitor_start", { command: `echo RESTART_LINE; sleep 600; : ${tag}`, label: "long-sleep" }]],
      "Started.",
    ),
  )
  const groups = await waitForProcess(tag, "the monitored sleep to run", 60_000)
  await waitForIdle(first.server.client, sessionID, 60_000, { busyGraceMs: 0 })
  const startTurnMs = Date.now() - promptedAt
  // The record shows it running, with its line (the writer lags a change by at most ~0.5 s).
  const recorded = await waitFor(
    () => {
      const found = data.monitors().find(({ monitor }) => monitor.status.kind === "running" && monitor.linesSeen >= 1)
      return found && { name: found.file, monitor: found.monitor }
    },
    10_000,
    50,
    "the state record of the running monitor",
  )
  // One file per plugin instance of the server process: server-<pid>-<start>-<instance>.json.
  expect(recorded.name).toMatch(new RegExp(`^server-${first.server.pid}-\\d+-[0-9a-f]+\\.json$`))
  expect(recorded.monitor.label).toBe("long-sleep")
  const recordText = readFileSync(join(stateDir, recorded.name), "utf8")
  expect(recordText).not.toContain("sleep 600")
  console.log(`[restart] the first server's record ${recorded.name}:\n${recordText.trim()}`)

  // 2. Crash: SIGKILL to the server's group. The watchdog ends the monitored process.
  await crash(first)
  await explained(first, { session: sessionID }, async () => {
    await waitFor(
      () => liveProcesses(tag, groups).length === 0,
      10_000,
      50,
      "the monitored process to be ended by its watchdog",
    )
  })
  expect(stateFiles()).toEqual([recorded.name])
  // Beside it, two records a restarted server must survive: a corrupt one, and a dead server's
  // monitor whose session does not exist.
  writeFileSync(join(stateDir, "server-999999998-1.json"), '{"format": "opencode-monitor/state@1", "server": {')
  writeFileSync(
    join(stateDir, "server-999999999-1.json"),
    JSON.stringify({
      format: STATE_FORMAT,
      server: { pid: 999_999_999, pidStartTime: "1", directory: dirs.project, updatedAt: Date.now() },
      monitors: [{ ...recorded.monitor, id: "mon_nosession", sessionID: "ses_0000000000000000000000000" }],
    }),
  )

  // 3. A new server on the same data: one request, and the session is told.
  const second = await restart(sessionID)
  await explained(second.live, { session: sessionID }, async () => {
    const lost = await waitForEnvelope(second.live, sessionID, (e) => e.status === LOST, "the lost envelope", 60_000)
    const report = await waitForReply(
      second.live,
      sessionID,
      lost.message.info.id,
      (text) => text === exitReport({ monitorId: recorded.monitor.id, label: "long-sleep", status: LOST }),
      "the REPORT turn",
      60_000,
    )
    const noticeMs = lost.message.info.time.created - second.requestedAt
    const reportMs = (report.info.time.completed ?? 0) - second.requestedAt
    console.log(
      `[restart] after the first request: lost envelope in the session at +${noticeMs} ms, REPORT turn completed at +${reportMs} ms ` +
        `(same run, for scale: the first server's prompt → monitor_start → idle took ${startTurnMs} ms)`,
    )
    console.log(`[restart] the envelope:\n${lost.text}\n[restart] the report: ${textOf(report)}`)
    expect(lost.monitorId).toBe(recorded.monitor.id)
    expect(lost.text).toContain("command_label: long-sleep\n")
    expect(lost.text).toContain("[stdout seq=1] RESTART_LINE\n")
    // A wake through the normal path: reply-wanting, the session's own agent and model.
    const info = lost.message.info as { agent?: string; model?: { providerID: string; modelID: string } }
    expect(info.agent).toBe("build")
    expect(info.model).toEqual({ providerID: "mock", modelID: "m" })
    expect(liveProcesses(tag, groups)).toEqual([])
    const recoveryLines = serverLog(second.live).filter((line) =>
      /lost monitor|reporting a monitor lost|monitor state|sent monitor output/.test(line),
    )
    console.log(`[restart] the second server's recovery log:\n${recoveryLines.join("\n")}`)
    const log = serverLog(second.live).join("\n")
    expect(log).toContain("lost monitor not reported: its session no longer exists")
    // Skipped files are counted in recovery's one summary line.
    expect(log).toContain("unreadable (e.g. server-999999998-1.json")
    // The dead server's record is claimed and gone; the corrupt one is left as it was.
    await waitFor(
      () => (stateFiles().join() === "server-999999998-1.json" ? true : undefined),
      10_000,
      100,
      "the claimed records to be removed",
    )
  })

  // 4. Once more: a third server on the same data reports nothing again.
  await crash(second.live)
  const third = await restart(sessionID)
  await explained(third.live, { session: sessionID }, async () => {
    // Recovery ran when the corrupt record is logged again; then give a notice time to arrive.
    await waitFor(
      () =>
        serverLog(third.live).some((line) => line.includes("unreadable (e.g. server-999999998-1.json"))
          ? true
          : undefined,
      15_000,
      100,
      "the third server's recovery to run",
    )
    await sleep(5_000)
    const lostNotices = (await third.live.envelopes(sessionID)).filter((e) => e.status === LOST)
    expect(lostNotices).toHaveLength(1)
    expect(serverLog(third.live).join("\n")).not.toContain("reporting a monitor lost")
  })
}, 300_000)
