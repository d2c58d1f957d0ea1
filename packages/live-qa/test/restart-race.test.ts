// test-runner: about 66 s (scripts/test.ts starts the longest first)
/**
 * Restart-safe, two servers at once: after a crash, two `opencode serve` processes start
 * together on the same data dir. Both load the plugin and look at the dead server's record; the
 * claim (an atomic rename) lets exactly one of them report the lost monitor. Takes 40–90 s.
 */
import { afterAll, afterEach, expect, test } from "bun:test"
import { removeIsolatedDirs } from "../src/isolated-env.ts"
import { envelopesIn, monitorAgent } from "../src/monitor-agent.ts"
import { type MonitorQA, PLUGIN_PATH, startMonitorQA } from "../src/monitor-qa.ts"
import { type OpencodeServer, startOpencode } from "../src/opencode-server.ts"
import { liveProcesses, planPrompt, waitForProcess } from "../src/scenario.ts"
import { startScriptedModel } from "../src/scripted-model.ts"
import { restartData } from "../src/state-records.ts"
import { getMessages, sleep, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

const data = restartData("oc-restart-race-")
const { dirs } = data
const running: MonitorQA[] = []
afterEach(async () => {
  await Promise.all(running.splice(0).map((qa) => qa.stop().catch(() => undefined)))
})
afterAll(() => removeIsolatedDirs(dirs))

const PLUGIN_OPTIONS = { kill_grace_ms: 500 }
const LOST = "lost (the opencode server stopped while it ran)"
const reported = (server: OpencodeServer) =>
  server.logs.filter((line) => line.text.includes("reporting a monitor lost")).length
const recoveryLog = (server: OpencodeServer) =>
  server.logs
    .map((line) => line.text)
    .filter((text) => /lost monitor|reporting a monitor lost|monitor state|sent monitor output/.test(text))
    .join("\n")

test("two servers starting together on a crashed server's data report its lost monitor exactly once", async () => {
  const first = await startMonitorQA({ dirs, pluginOptions: PLUGIN_OPTIONS })
  running.push(first)
  const tag = `live-qa-restart-race-${process.pid}-${Date.now()}`
  const sessionID = await first.newSession()
  await first.prompt(
    sessionID,
    planPrompt(
      "Keep it running.",
      [["monitor_start", { command: `sleep 600; : ${tag}`, label: "race-sleep" }]],
      "Started.",
    ),
  )
  const groups = await waitForProcess(tag, "the monitored sleep to run", 60_000)
  await waitForIdle(first.server.client, sessionID, 60_000, { busyGraceMs: 0 })
  await waitFor(
    () => data.monitors().some(({ monitor }) => monitor.status.kind === "running") || undefined,
    10_000,
    50,
    "the state record of the running monitor",
  )
  await first.timeline.stop()
  await first.server.crash()
  running.splice(running.indexOf(first), 1)
  await waitFor(() => liveProcesses(tag, groups).length === 0, 10_000, 50, "the watchdog to end the monitor")

  // Two servers on the same data, started one after the other (opencode's own start-up migration
  // locks the database) and with no request yet, so neither has loaded the plugin. Then one
  // request to each at the same moment loads both plugins together.
  const model = startScriptedModel(monitorAgent())
  const servers: OpencodeServer[] = []
  try {
    for (let i = 0; i < 2; i++) {
      servers.push(
        await startOpencode({
          modelBaseURL: model.baseURL,
          plugins: [[PLUGIN_PATH, PLUGIN_OPTIONS]],
          permission: { bash: "allow" },
          dirs,
        }),
      )
    }
    const [a, b] = servers as [OpencodeServer, OpencodeServer]
    await Promise.all(servers.map((server) => server.client.session.get({ path: { id: sessionID } })))
    const lostNotices = async () =>
      (await getMessages(a.client, sessionID)).filter(
        (m) => m.info.role === "user" && envelopesIn(textOf(m)).some((e) => e.status === LOST),
      )
    await waitFor(async () => ((await lostNotices()).length > 0 ? true : undefined), 60_000, 100, "the lost envelope")
    // Give a second notice every chance to arrive.
    await sleep(5_000)
    const notices = await lostNotices()
    console.log(
      `[restart-race] lost notices in the session: ${notices.length}; reported by server a: ${reported(a)}, b: ${reported(b)}`,
    )
    console.log(
      `[restart-race] recovery log of a:\n${recoveryLog(a)}\n[restart-race] recovery log of b:\n${recoveryLog(b)}`,
    )
    // Both plugins loaded and looked; one claimed the record.
    const looked = servers.map((server) => server.logs.find((line) => line.text.includes("restart recovery looked")))
    expect(looked.every((line) => line !== undefined)).toBe(true)
    const claims = looked.map((line) => Number(line?.text.match(/ claimed=(\d+)/)?.[1]))
    console.log(
      `[restart-race] claims: a ${claims[0]}, b ${claims[1]}; the two recoveries logged ${Math.abs((looked[0]?.at ?? 0) - (looked[1]?.at ?? 0))} ms apart`,
    )
    expect(claims.sort()).toEqual([0, 1])
    expect(notices).toHaveLength(1)
    expect(reported(a) + reported(b)).toBe(1)
    expect(liveProcesses(tag, groups)).toEqual([])
  } finally {
    for (const server of servers) await server.stop().catch(() => undefined)
    await model.stop()
  }
}, 300_000)
