// test-runner: about 33 s (scripts/test.ts starts the longest first)
/**
 * Installed from a tarball: opencode installs `opencode-monitor@file:<tgz>` (this repo's packed
 * build) itself, scripts off, and the terminal-wake scenario runs through it. The isolated HOME's
 * npm registry is a closed port on 127.0.0.1, so the install also proves the package needs nothing
 * from a registry. Takes about 15 s (pack, install, scenario).
 */
import { afterEach, expect, test } from "bun:test"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "../src/free-port.ts"
import { packPlugin } from "../src/local-registry.ts"
import { MONITOR_TOOLS, type MonitorQA, startMonitorQA, toolNamesSeen } from "../src/monitor-qa.ts"
import {
  expectTerminalWakeReport,
  firstProjectRequest,
  installedPackage,
  monitorTools,
  readmeInstallEntry,
} from "../src/packaged-plugin.ts"

let qa: MonitorQA | undefined
let packDir: string | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  if (packDir) rmSync(packDir, { recursive: true, force: true })
  qa = packDir = undefined
})

test("from a tarball: opencode installs opencode-monitor@file:<tgz> with no registry and the session wakes on exit", async () => {
  packDir = mkdtempSync(join(tmpdir(), "oc-pack-"))
  const tarball = await packPlugin(packDir)
  const [, pluginOptions] = readmeInstallEntry()
  // Nothing listens there: any registry request would fail.
  const closedRegistry = `http://127.0.0.1:${await freePort()}/`
  let toolIds: string[] = []
  qa = await startMonitorQA({
    pluginSpec: `opencode-monitor@file:${tarball}`,
    pluginOptions,
    prepare: (dirs) => writeFileSync(join(dirs.home, ".npmrc"), `registry=${closedRegistry}\n`),
    onServer: async (server) => {
      toolIds = await firstProjectRequest(server)
    },
  })
  expect(monitorTools(toolIds)).toEqual(MONITOR_TOOLS)

  const report = await expectTerminalWakeReport(qa)
  expect(report).toContain("exited (code=7)")
  expect(toolNamesSeen(qa.model)).toEqual(MONITOR_TOOLS)
  const installed = installedPackage(qa.server.dirs.cache, "opencode-monitor")
  const manifest = JSON.parse(readFileSync(join(installed.packageDir, "package.json"), "utf8"))
  expect(manifest.exports["./server"]).toBe("./dist/index.js")
  expect(manifest.dependencies ?? {}).toEqual({})
  expect((await qa.stop()).leftovers).toEqual([])
}, 180_000)
