// test-runner: about 53 s (scripts/test.ts starts the longest first)
/**
 * Restart-safe, the exit notice still owed: a monitor exits while its session is busy
 * (a long bash call), so its exit notice waits in the queue; the server is SIGKILLed before it
 * could be sent. The next server on the same data delivers that notice with the status the
 * command really ended with (`exited (code=3)`), not `lost`, and the agent reports it; the turn
 * the crash cut off (never completed) does not hold the notice back. Takes
 * 40–90 s.
 */
import { afterAll, afterEach, expect, test } from "bun:test"
import { removeIsolatedDirs } from "../src/isolated-env.ts"
import { exitReport } from "../src/monitor-agent.ts"
import { type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import { explained, planPrompt, waitForEnvelope, waitForReply } from "../src/scenario.ts"
import { restartData } from "../src/state-records.ts"
import { waitFor } from "../src/timeline.ts"

const data = restartData("oc-restart-owed-")
const { dirs } = data
let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})
afterAll(() => removeIsolatedDirs(dirs))

const PLUGIN_OPTIONS = { kill_grace_ms: 500 }
const RECORDED = "exited (code=3), as the previous opencode server recorded it (not observed by this server)"

test("an exit notice still queued when the server crashed is delivered by the next server, as it ended", async () => {
  // No ceiling on the first server: the exit notice waits for the busy session until the crash.
  const first = await startMonitorQA({ dirs, pluginOptions: { ...PLUGIN_OPTIONS, max_active_defer_ms: 0 } })
  qa = first
  const sessionID = await first.newSession()
  await first.prompt(
    sessionID,
    planPrompt(
      "Build, then wait.",
      [
        ["monitor_start", { command: "echo OWED_LINE; exit 3", label: "owed-build" }],
        ["bash", { command: "sleep 120", description: "wait" }],
      ],
      "Done.",
    ),
  )
  // The record says: ended with code 3, notice not yet sent (the session is busy in `sleep 120`).
  const owed = await waitFor(
    () => data.monitors().find(({ monitor }) => monitor.wakePending)?.monitor,
    60_000,
    50,
    "the record of an exit whose notice waits",
  )
  expect(owed.status).toEqual({ kind: "exited", code: 3 })
  expect((await first.envelopes(sessionID)).filter((e) => e.status !== "running")).toEqual([])
  await first.timeline.stop()
  await first.server.crash()

  const second = await startMonitorQA({ dirs, pluginOptions: PLUGIN_OPTIONS })
  qa = second
  await explained(second, { session: sessionID }, async () => {
    const notice = await waitForEnvelope(
      second,
      sessionID,
      (e) => e.status !== "running",
      "the owed exit notice",
      60_000,
    )
    // What the dead server's record claims, shown as its claim (turn 3), never as a fresh exit.
    expect(notice.status).toBe(RECORDED)
    expect(notice.monitorId).toBe(owed.id)
    expect(notice.text).toContain("[stdout seq=1] OWED_LINE\n")
    await waitForReply(
      second,
      sessionID,
      notice.message.info.id,
      (text) => text.includes(exitReport({ monitorId: owed.id, label: "owed-build", status: RECORDED })),
      "the REPORT turn",
      60_000,
    )
    const log = second.server.logs.map((line) => line.text).join("\n")
    expect(log).toContain("delivering an exit notice its stopped server still owed")
    // The crash left the session's last turn unfinished for good: that stale turn does not hold the
    // notice back (no waiting for the 60 s ceiling), the session is idle on this server.
    expect(log).toMatch(/"sent monitor output".*forceActiveDispatch=false reason="session idle"/)
    expect(log).not.toContain("forced monitor output")
    console.log(
      `[restart-owed] ${second.server.logs
        .map((line) => line.text)
        .filter((text) => /still owed|sent monitor output|forced monitor output|monitor output deferred/.test(text))
        .join("\n")}`,
    )
  })
}, 300_000)
