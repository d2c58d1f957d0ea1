// test-runner: about 45 s (scripts/test.ts starts the longest first)
/**
 * Installed by name, as users install it: this repo's packed build is published to a local npm
 * registry on 127.0.0.1 (verdaccio, no uplinks), the isolated opencode's `~/.npmrc` points at it,
 * and the config holds the README's install line verbatim. opencode installs the package itself
 * (scripts off) and the terminal-wake scenario runs through it. A second, unpublished plugin name
 * shows what a failed install looks like: a `session.error` event on `GET /global/event`.
 * Takes about 20 s (pack, registry start, publish, install, scenario).
 */
import { afterEach, expect, test } from "bun:test"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type LocalRegistry, packPlugin, startLocalRegistry } from "../src/local-registry.ts"
import { MONITOR_TOOLS, type MonitorQA, startMonitorQA, toolNamesSeen } from "../src/monitor-qa.ts"
import {
  expectTerminalWakeReport,
  firstProjectRequest,
  footprint,
  type GlobalEvents,
  installBlock,
  installedPackage,
  monitorTools,
  readmeInstallEntry,
  watchGlobalEvents,
} from "../src/packaged-plugin.ts"
import { waitFor } from "../src/wait.ts"

const UNPUBLISHED = "opencode-monitor-unpublished-qa"
// Our code and libraries (docs/install.md); the shell grammar's wasm files on top.
const FOOTPRINT_LIMIT_BYTES = 2_000_000

let qa: MonitorQA | undefined
let registry: LocalRegistry | undefined
let global: GlobalEvents | undefined
let packDir: string | undefined
afterEach(async () => {
  await global?.stop().catch(() => undefined)
  await qa?.stop().catch(() => undefined)
  await registry?.stop().catch(() => undefined)
  if (packDir) rmSync(packDir, { recursive: true, force: true })
  qa = registry = global = packDir = undefined
})

test("by name: the README's install line installs the published package and the session wakes on exit", async () => {
  packDir = mkdtempSync(join(tmpdir(), "oc-pack-"))
  const tarball = await packPlugin(packDir)
  registry = await startLocalRegistry()
  registry.publish(tarball)
  const [spec, pluginOptions] = readmeInstallEntry()
  expect(spec).toBe("opencode-monitor")

  const npmrc = registry.npmrc()
  let toolIds: string[] = []
  qa = await startMonitorQA({
    pluginSpec: spec,
    pluginOptions,
    extraPlugins: [[UNPUBLISHED, {}]],
    prepare: (dirs) => writeFileSync(join(dirs.home, ".npmrc"), npmrc),
    onServer: async (server) => {
      global = await watchGlobalEvents(server.url)
      toolIds = await firstProjectRequest(server)
    },
  })
  if (!toolIds.includes("monitor_start")) console.error(`global events: ${JSON.stringify(global?.events)}`)
  expect(monitorTools(toolIds)).toEqual(MONITOR_TOOLS)

  const report = await expectTerminalWakeReport(qa)
  expect(report).toContain("exited (code=7)")
  expect(toolNamesSeen(qa.model)).toEqual(MONITOR_TOOLS)

  // It is the package from our registry, with the README that carries the same install line.
  const registryLog = registry.logs.map((l) => l.text).join("\n")
  expect(registryLog).toContain("GET /opencode-monitor/-/opencode-monitor-0.1.0.tgz")
  const installed = installedPackage(qa.server.dirs.cache, "opencode-monitor")
  expect(installBlock(readFileSync(join(installed.packageDir, "README.md"), "utf8"))).toBe(
    installBlock(readFileSync(join(import.meta.dir, "../../../README.md"), "utf8")),
  )
  expect(readFileSync(join(installed.packageDir, "LICENSE"), "utf8")).toStartWith("MIT License")

  // What opencode installed for the plugin stays small: no @opencode-ai/plugin tree, no zod, no re2js.
  const size = footprint(installed.specDir)
  console.log(`install footprint: ${size.bytes} bytes in ${size.files} files (${size.wasmBytes} bytes of wasm)`)
  expect(size.bytes - size.wasmBytes).toBeLessThanOrEqual(FOOTPRINT_LIMIT_BYTES)
  expect(readFileSync(join(installed.specDir, "package-lock.json"), "utf8")).not.toContain("@opencode-ai/plugin")

  // The unpublished name fails to install: opencode says so only as a session.error event.
  const failure = await waitFor(
    () => global?.events.find((e) => e.type === "session.error" && JSON.stringify(e.properties).includes(UNPUBLISHED)),
    30_000,
    100,
    `a session.error naming ${UNPUBLISHED}`,
  )
  console.log(`failed install event: ${JSON.stringify(failure)}`)
  expect(JSON.stringify(failure.properties)).toContain(`Failed to install plugin ${UNPUBLISHED}@latest: 404 Not Found`)
  await global?.stop()
  expect((await qa.stop()).leftovers).toEqual([])
}, 180_000)
