// test-runner: about 157 s (scripts/test.ts starts the longest first)
/**
 * The TUI part installed as users install it: both parts listed in opencode.json and
 * tui.json by name from a local registry (verdaccio on 127.0.0.1), and as `opencode-monitor@file:<tgz>`.
 * By name the sidebar shows the monitor. From a tarball opencode 1.18 installs the TUI part but cannot
 * load it; the server part says so (log and toast) and names what to write instead: the TUI part's
 * entry by path, which the package holds and tui.test.ts shows loading. A real `opencode` under tmux
 * each time.
 *
 * Needs tmux. Takes ≈ 1.5–2 min (two TUI starts).
 */
import { afterEach, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "../src/free-port.ts"
import { type LocalRegistry, packPlugin, startLocalRegistry } from "../src/local-registry.ts"
import { monitorAgent } from "../src/monitor-agent.ts"
import { readmeInstallEntry, readmeTuiPlugins } from "../src/packaged-plugin.ts"
import { type ScriptedModel, startScriptedModel } from "../src/scripted-model.ts"
import { hasTmux, sidebarOf, startTui, TUI_PLUGIN_PATH, type TuiDriver } from "../src/tui-driver.ts"
import { sleep } from "../src/wait.ts"

const BUILD = "sh -c 'echo TUI_LINE_1; sleep 2; echo TUI_LINE_2; sleep 2; exit 3'"
const PROMPT = [
  "Build it.",
  `STEP monitor_start ${JSON.stringify({ command: BUILD, label: "qa-build" })}`,
  "SAY Started the build.",
].join("\n")

let model: ScriptedModel | undefined
let tui: TuiDriver | undefined
let registry: LocalRegistry | undefined
const temps: string[] = []
afterEach(async () => {
  await tui?.stop()
  await model?.stop()
  await registry?.stop().catch(() => undefined)
  for (const dir of temps.splice(0)) rmSync(dir, { recursive: true, force: true })
  tui = model = registry = undefined
})

function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  temps.push(dir)
  return dir
}

const sidebarShows = (screen: string, text: string) => sidebarOf(screen).includes(text)

/** Starts a TUI with the server part from `server`, tui.json's `tuiPlugins`, the build prompt, and the registry setting. */
async function start(server: string, tuiPlugins: string[], npmrc: string): Promise<TuiDriver> {
  model = startScriptedModel(monitorAgent())
  const [, options] = readmeInstallEntry()
  tui = await startTui({
    modelBaseURL: model.baseURL,
    plugins: [[server, options]],
    tuiPlugins,
    permission: { bash: "allow" },
    prepare: (dirs) => writeFileSync(join(dirs.home, ".npmrc"), npmrc),
    args: ["--prompt", PROMPT],
  })
  return tui
}

/** opencode's own log of a TUI run: where a plugin that failed to install or load says why. */
function opencodeLog(driver: TuiDriver): string {
  const logDir = join(driver.dirs.data, "opencode", "log")
  return readdirSync(logDir)
    .map((name) => readFileSync(join(logDir, name), "utf8"))
    .join("\n")
}

/** `wait`, and when it fails, the log's plugin and error lines with the failure: a red names its cause. */
async function explained<T>(driver: TuiDriver, wait: Promise<T>): Promise<T> {
  try {
    return await wait
  } catch (error) {
    const lines = opencodeLog(driver)
      .split("\n")
      .filter((line) => /plugin|ERROR|error=/.test(line))
    console.error(`[tui] opencode's plugin and error log lines:\n${lines.slice(-40).join("\n")}`)
    throw error
  }
}

/** The sidebar shows qa-build, then its exit, as the person sees it. */
async function expectSidebar(driver: TuiDriver): Promise<string> {
  await explained(
    driver,
    driver.waitForScreen((s) => sidebarShows(s, "qa-build"), 180_000, "qa-build in the sidebar"),
  )
  return explained(
    driver,
    driver.waitForScreen((s) => sidebarShows(s, "exited (code=3)"), 60_000, "exited (code=3) in the sidebar"),
  )
}

test("by name: the README's tui.json from the registry shows the monitor in the sidebar", async () => {
  expect(hasTmux(), "tmux is missing: apt-get install -y tmux").toBe(true)
  const tarball = await packPlugin(tempDir("oc-pack-"))
  registry = await startLocalRegistry()
  registry.publish(tarball)
  // tui.json holds the README's block verbatim: the line a person copies is the line tested.
  const driver = await start("opencode-monitor", readmeTuiPlugins(), registry.npmrc())
  const ended = await expectSidebar(driver)
  console.log(`[tui by name] sidebar:\n${sidebarOf(ended)}`)
  expect(registry.logs.map((l) => l.text).join("\n")).toContain("GET /opencode-monitor/-/opencode-monitor-0.1.0.tgz")
}, 300_000)

test("from a tarball: opencode-monitor@file: in tui.json is reported with what to write instead, and that line shows the sidebar", async () => {
  expect(hasTmux(), "tmux is missing: apt-get install -y tmux").toBe(true)
  const tarball = await packPlugin(tempDir("oc-pack-"))
  // Nothing listens there: the tarball needs no registry.
  const npmrc = `registry=http://127.0.0.1:${await freePort()}/\n`
  const spec = `opencode-monitor@file:${tarball}`
  const driver = await start(spec, [spec], npmrc)

  // The person is told, on screen and in the log; the server part runs (the session wakes on the exit)
  // while the sidebar never shows the monitor.
  let toast = ""
  let sidebarSawMonitor = false
  const woke = await explained(
    driver,
    driver.waitForScreen(
      (screen) => {
        if (!toast && screen.includes("TUI part not loaded")) toast = screen
        if (sidebarShows(screen, "qa-build")) sidebarSawMonitor = true
        return toast !== "" && screen.includes("finished: exited (code=3)")
      },
      180_000,
      "the warning toast and the exit report",
    ),
  )
  console.log(
    `[tui file:] the toast:\n${toast
      .split("\n")
      .filter((row) => row.includes("┃  "))
      .join("\n")}`,
  )
  await sleep(2_000)
  expect(sidebarSawMonitor || sidebarShows(woke, "qa-build") || sidebarShows(driver.capture(), "qa-build")).toBe(false)
  const warning = opencodeLog(driver)
    .split("\n")
    .find((line) => line.includes("cannot load, so the sidebar shows no monitors"))
  console.log(`[tui file:] the log: ${warning}`)
  expect(warning).toContain("opencode-monitor@file:")
  expect(warning).toContain("/absolute/path/package/src/tui/index.ts")

  // What the warning says to write is in the package: the TUI part's entry, which tui.test.ts loads by
  // path (from the checkout) and sees the sidebar.
  const unpacked = tempDir("oc-unpacked-")
  const untar = Bun.spawnSync({ cmd: ["tar", "xzf", tarball, "-C", unpacked] })
  expect(untar.exitCode).toBe(0)
  expect(readFileSync(join(unpacked, "package/src/tui/index.ts"), "utf8")).toBe(readFileSync(TUI_PLUGIN_PATH, "utf8"))
}, 300_000)
