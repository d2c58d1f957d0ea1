// test-runner: about 51 s (scripts/test.ts starts the longest first)
/**
 * The TUI attached to a server whose state files it cannot see (`opencode attach`, with its own
 * HOME/XDG dirs, as on another machine): the sidebar and the Monitors dialog fall back to what the
 * session's messages show, say so, and offer no stop. Needs tmux. Takes ≈ 30–90 s.
 */
import { afterAll, expect, test } from "bun:test"
import { type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import { hasTmux, openMonitorsDialog, sidebarOf, startTui, TUI_PLUGIN_PATH, type TuiDriver } from "../src/tui-driver.ts"

const BUILD = "sh -c 'echo REMOTE_LINE_1; sleep 2; echo REMOTE_LINE_2; sleep 4; exit 3'"
const PROMPT = [
  "Build it.",
  `STEP monitor_start ${JSON.stringify({ command: BUILD, label: "remote-build" })}`,
  "SAY Started the build.",
].join("\n")

let qa: MonitorQA | undefined
let tui: TuiDriver | undefined
afterAll(async () => {
  await tui?.stop()
  await qa?.stop()
})

test("attached to a server it cannot see the state of, the TUI shows the monitors from the messages, without stop", async () => {
  expect(hasTmux(), "tmux is missing: apt-get install -y tmux").toBe(true)
  qa = await startMonitorQA()
  const sessionID = await qa.newSession({ title: "remote TUI" })
  tui = await startTui({
    modelBaseURL: qa.model.baseURL,
    tuiPlugins: [TUI_PLUGIN_PATH],
    attach: { url: qa.server.url, directory: qa.server.directory, sessionID },
  })
  const driver = tui
  await driver.waitForScreen((screen) => screen.includes("remote TUI"), 180_000, "the attached session")
  await qa.prompt(sessionID, PROMPT)

  // The monitor_start result and the envelopes delivered so far; the note says where it comes from.
  const running = await driver.waitForScreen(
    (screen) =>
      /• remote-build\s+running/.test(sidebarOf(screen)) &&
      sidebarOf(screen).includes("(from messages; stop unavailable)"),
    60_000,
    "remote-build running, from the messages",
  )
  expect(sidebarOf(running)).not.toContain("Monitors (0")
  const ended = await driver.waitForScreen(
    (screen) => /• remote-build\s+exited \(code=3\)/.test(sidebarOf(screen)),
    60_000,
    "remote-build exited (code=3), from the terminal envelope",
  )
  expect(sidebarOf(ended)).toMatch(/2 lines › REMOTE_LINE_2/)

  // The dialog lists it and says stop is not available; there is no Stop action.
  await openMonitorsDialog(driver)
  const list = await driver.waitForScreen(
    (screen) => /remote-build\s+exited \(code=3\)/.test(screen) && screen.includes("(from messages; stop unavailable)"),
    30_000,
    "the dialog listing remote-build with the note",
  )
  expect(list).toContain("remote-build")
  driver.keys("Enter")
  const detail = await driver.waitForScreen(
    (screen) => screen.includes("remote-build (mon_") && screen.includes("Status: exited (code=3)"),
    30_000,
    "the detail",
  )
  expect(detail).not.toMatch(/ Stop SIGTERM/)
  expect(detail).toMatch(/\[stdout seq=2\] REMOTE_LINE_2/)
}, 400_000)
