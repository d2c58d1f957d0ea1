// test-runner: about 95 s (scripts/test.ts starts the longest first)
/**
 * The person's-eye view: a real `opencode` TUI under tmux with the LOCAL server part
 * (opencode.json) and the LOCAL TUI part (tui.json), driven by the scripted model. The sidebar
 * shows a monitor's label, `running`, its last line as it changes, then `exited (code=3)`; the
 * "Monitors" palette command opens the dialog, and stopping a second, long-running monitor from
 * it ends that process (checked in the process table) with no wake.
 *
 * Needs tmux (`apt-get install -y tmux`). Takes ≈ 40–90 s (most of it the TUI's start on a
 * loaded machine); bounded by the test timeout below.
 */
import { afterAll, expect, test } from "bun:test"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { envelopesIn, monitorAgent } from "../src/monitor-agent.ts"
import { PLUGIN_PATH } from "../src/monitor-qa.ts"
import { psAll } from "../src/process-group.ts"
import { type ScriptedModel, startScriptedModel } from "../src/scripted-model.ts"
import { getMessages, textOf } from "../src/timeline.ts"
import { hasTmux, openMonitorsDialog, sidebarOf, startTui, TUI_PLUGIN_PATH, type TuiDriver } from "../src/tui-driver.ts"
import { sleep, waitFor } from "../src/wait.ts"

const MARKER = `omo_tui_server_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
// Lines 3 s apart: on a loaded CI machine the sidebar has shown a new monitor up to 5 s after its start.
const BUILD = "sh -c 'echo TUI_LINE_1; sleep 3; echo TUI_LINE_2; sleep 3; echo TUI_LINE_3; sleep 3; exit 3'"
const SERVER = `sh -c 'while :; do echo tick; sleep 1; done' ${MARKER}`
const PROMPT = [
  "Build it and keep the dev server running.",
  `STEP monitor_start ${JSON.stringify({ command: BUILD, label: "qa-build" })}`,
  `STEP monitor_start ${JSON.stringify({ command: SERVER, label: "qa-server" })}`,
  "SAY Started the build and the dev server.",
].join("\n")

let model: ScriptedModel | undefined
let tui: TuiDriver | undefined
afterAll(async () => {
  await tui?.stop()
  await model?.stop()
})

/** The sidebar rows of one monitor: its status row and the row under it (lines seen › last line). */
function monitorRows(sidebar: string, label: string): { status: string; detail: string } | undefined {
  const rows = sidebar.split("\n")
  const at = rows.findIndex((row) => row.includes(`• ${label}`))
  if (at === -1) return undefined
  return { status: rows[at] ?? "", detail: rows[at + 1] ?? "" }
}

test("the person sees monitors in the sidebar and stops one from the Monitors dialog, without a wake", async () => {
  expect(hasTmux(), "tmux is missing: apt-get install -y tmux").toBe(true)
  model = startScriptedModel(monitorAgent())
  tui = await startTui({
    modelBaseURL: model.baseURL,
    plugins: [[PLUGIN_PATH, { kill_grace_ms: 1000 }]],
    tuiPlugins: [TUI_PLUGIN_PATH],
    permission: { bash: "allow" },
    args: ["--prompt", PROMPT],
  })
  const driver = tui
  const screens: { at: number; label: string; screen: string }[] = []
  const keep = (label: string, screen: string) => screens.push({ at: Date.now(), label, screen })

  // 1. The build monitor: label and running, its last line changing, then exited (code=3).
  const first = await driver.waitForScreen(
    (screen) => monitorRows(sidebarOf(screen), "qa-build")?.status.includes("running") === true,
    180_000,
    "qa-build running in the sidebar",
  )
  const firstSeenAt = Date.now()
  keep("build running", first)
  const lastLinesWhileRunning = new Set<string>()
  let ended = ""
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    const screen = driver.capture()
    const rows = monitorRows(sidebarOf(screen), "qa-build")
    const last = rows?.detail.match(/› (TUI_LINE_\d)/)?.[1]
    if (rows?.status.includes("running") && last && !lastLinesWhileRunning.has(last)) {
      lastLinesWhileRunning.add(last)
      keep(`build running, last line ${last}`, screen)
    }
    if (rows?.status.includes("exited (code=3)")) {
      ended = screen
      break
    }
    await sleep(100)
  }
  keep("build exited", ended)
  expect(ended, "the sidebar never showed exited (code=3)").not.toBe("")
  // The last line changed on screen while the monitor ran (its lines are 3 s apart).
  console.log(`[tui] last lines seen while running: ${[...lastLinesWhileRunning].join(", ")}`)
  expect(lastLinesWhileRunning.size).toBeGreaterThanOrEqual(2)
  expect(monitorRows(sidebarOf(ended), "qa-build")?.detail).toContain("3 lines › TUI_LINE_3")

  // How soon after the monitor's start the sidebar showed it (a figure for the report, not a gate).
  const sessionID = await waitFor(
    async () => (await driver.client.session.list()).data?.[0]?.id,
    30_000,
    200,
    "the TUI's session",
  )
  const started = await waitFor(
    async () => {
      const messages = await getMessages(driver.client, sessionID)
      return messages
        .flatMap((m) => m.parts)
        .find((p) => p.type === "tool" && p.tool === "monitor_start" && p.state?.status === "completed")
    },
    30_000,
    200,
    "the monitor_start result",
  )
  const startedAt = started.state?.time?.start ?? firstSeenAt
  console.log(`[tui] qa-build on screen ${firstSeenAt - startedAt} ms after its monitor_start began`)

  // The exit of the build woke the agent once (its report is on screen); wait for the turn to end.
  await driver.waitForScreen(
    (screen) => screen.includes("finished: exited (code=3)"),
    60_000,
    "the agent's exit report",
  )
  await waitFor(
    async () => {
      const status = await driver.client.session.status()
      const mine = (status.data as Record<string, { type: string }> | undefined)?.[sessionID]
      return mine === undefined || mine.type === "idle"
    },
    60_000,
    200,
    "the session to be idle",
  )
  // The dev server's shell carries the marker; opencode's and tmux's own command lines carry the
  // whole prompt (with the marker in it), so they are left out.
  const serverRunning = () =>
    psAll().some(
      (p) => p.command.includes(MARKER) && !p.command.includes("STEP monitor_start") && !p.stat.startsWith("Z"),
    )
  expect(serverRunning()).toBe(true)
  expect(monitorRows(sidebarOf(driver.capture()), "qa-server")?.status).toContain("running")
  const requestsBeforeStop = model.scripted().length

  // 2. The palette command opens the dialog; the person stops the dev server from it.
  await openMonitorsDialog(driver)
  const list = await driver.waitForScreen(
    (screen) => /qa-server\s+running/.test(screen) && /qa-build\s+exited \(code=3\)/.test(screen),
    30_000,
    "the Monitors dialog listing both monitors",
  )
  keep("Monitors dialog", list)
  driver.keys("Enter") // the running one is listed first
  const detail = await driver.waitForScreen(
    (screen) => screen.includes("qa-server (mon_") && / Stop SIGTERM/.test(screen) && screen.includes("Lines seen:"),
    30_000,
    "the qa-server detail with Stop",
  )
  keep("qa-server detail", detail)
  expect(detail).toMatch(/\[stdout seq=\d+\] tick/)
  driver.keys("Enter") // Stop
  const confirm = await driver.waitForScreen((screen) => screen.includes("Stop qa-server?"), 30_000, "the confirmation")
  keep("stop confirmation", confirm)
  driver.keys("Enter") // Confirm
  await driver.waitForScreen((screen) => screen.includes("Stop requested: qa-server"), 30_000, "the stop toast")

  // The process is gone from the process table; the sidebar says who stopped it.
  await waitFor(() => !serverRunning(), 20_000, 100, "the dev server's process to end")
  const stoppedScreen = await driver.waitForScreen(
    (screen) => monitorRows(sidebarOf(screen), "qa-server")?.status.includes("stopped by you") === true,
    20_000,
    "qa-server stopped by you in the sidebar",
  )
  keep("qa-server stopped", stoppedScreen)

  // The agent is told by an observation (no reply asked), and not woken.
  const observation = await waitFor(
    async () => {
      const messages = await getMessages(driver.client, sessionID)
      return messages.find((m) =>
        envelopesIn(textOf(m)).some((e) => e.status === "stopped (by the person at the screen)"),
      )
    },
    30_000,
    200,
    "the stop observation in the session",
  )
  expect(observation.info.role).toBe("user")
  await sleep(3_000)
  expect(model.scripted().length).toBe(requestsBeforeStop)
  keep("final", driver.capture())
  // The envelopes (observations, the exit notice, the stop) are synthetic parts: the person sees none.
  for (const { label, screen } of screens) expect(`${label}: ${screen}`).not.toContain("OMO MONITOR OUTPUT")

  const evidence = process.env.TUI_EVIDENCE_DIR
  if (evidence) {
    mkdirSync(evidence, { recursive: true })
    screens.forEach((s, i) => {
      writeFileSync(
        join(evidence, `${String(i + 1).padStart(2, "0")}-${s.label.replace(/[^a-z0-9]+/gi, "-")}.txt`),
        s.screen,
      )
    })
  }
}, 400_000)
