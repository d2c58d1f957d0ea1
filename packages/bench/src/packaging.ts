/**
 * `bun packages/bench/src/packaging.ts [--base <git ref>]`: what opencode installs for the plugin,
 * and what loading it costs. The package is packed as for publishing (`npm pack`, whose prepack
 * builds dist/) and installed by a real, isolated `opencode serve` from `opencode-monitor@file:<tgz>`;
 * the footprint is every file opencode put in that spec's cache folder. With `--base`, the package
 * of that commit is packed and installed the same way first (its dependencies come from the npm
 * registry), for the before/after row. Load cost: importing the server entry in a fresh `bun`
 * process, the source path against the built file, alternating, 21 runs each (median and fastest).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { PLUGIN_PACKAGE_DIR, packPlugin } from "../../live-qa/src/local-registry.ts"
import { startOpencode } from "../../live-qa/src/opencode-server.ts"
import { type Footprint, footprint, installedPackage } from "../../live-qa/src/packaged-plugin.ts"
import { machineInfo } from "./machine.ts"
import { median } from "./stats.ts"

const LOAD_RUNS = 21

/** Installs the tarball through a real opencode (the first request to the project runs the install). */
async function installFootprint(tarball: string): Promise<Footprint & { installMs: number }> {
  const server = await startOpencode({
    modelBaseURL: "http://127.0.0.1:9/v1",
    plugins: [[`opencode-monitor@file:${tarball}`, {}]],
    startTimeoutMs: 60_000,
  })
  try {
    const started = Date.now()
    const response = await fetch(
      `${server.url}/experimental/tool/ids?directory=${encodeURIComponent(server.directory)}`,
    )
    const tools = await response.text()
    const installMs = Date.now() - started
    if (!tools.includes("monitor_start")) throw new Error(`the installed plugin did not load; tools: ${tools}`)
    return { ...footprint(installedPackage(server.dirs.cache, "opencode-monitor").specDir), installMs }
  } finally {
    await server.stop()
  }
}

/** The package as it was at `ref`, packed without scripts (it had none that build). */
function packAt(ref: string, destination: string): string {
  const checkout = join(destination, "checkout")
  const archive = Bun.spawnSync(
    [
      "bash",
      "-c",
      `mkdir -p '${checkout}' && git archive '${ref}' packages/opencode-monitor | tar -x -C '${checkout}'`,
    ],
    {
      cwd: resolve(PLUGIN_PACKAGE_DIR, "../.."),
    },
  )
  if (archive.exitCode !== 0) throw new Error(`git archive ${ref} failed: ${archive.stderr}`)
  const dir = join(checkout, "packages/opencode-monitor")
  const packed = Bun.spawnSync(["npm", "pack", "--ignore-scripts", "--pack-destination", destination], { cwd: dir })
  if (packed.exitCode !== 0) throw new Error(`npm pack at ${ref} failed: ${packed.stderr}`)
  return join(destination, packed.stdout.toString().trim().split("\n").pop() ?? "")
}

function importMs(entry: string): number {
  const script = `const t = performance.now(); await import(${JSON.stringify(entry)}); console.log(performance.now() - t)`
  const result = Bun.spawnSync([process.execPath, "-e", script], { cwd: tmpdir() })
  if (result.exitCode !== 0) throw new Error(`importing ${entry} failed: ${result.stderr}`)
  return Number(result.stdout.toString().trim())
}

type LoadCost = { median: number; min: number }

function loadCost(): { source: LoadCost; built: LoadCost } {
  const source = resolve(PLUGIN_PACKAGE_DIR, "src/index.ts")
  const built = resolve(PLUGIN_PACKAGE_DIR, "dist/index.js")
  const runs = { source: [] as number[], built: [] as number[] }
  importMs(source) // warm the transpiler cache, as opencode's own runs would be
  for (let i = 0; i < LOAD_RUNS; i++) {
    runs.source.push(importMs(source))
    runs.built.push(importMs(built))
  }
  const cost = (values: number[]) => ({ median: median(values), min: Math.min(...values) })
  return { source: cost(runs.source), built: cost(runs.built) }
}

const row = (what: string, f: Footprint & { installMs: number }) =>
  `| ${what} | ${f.bytes.toLocaleString("en-US")} bytes (${(f.bytes / 1e6).toFixed(2)} MB) | ${f.files.toLocaleString("en-US")} | ${f.installMs} ms |`

const work = mkdtempSync(join(tmpdir(), "oc-bench-pack-"))
try {
  const machine = machineInfo()
  console.log(
    `machine: ${machine.cpu}, ${machine.cores} cores, ${machine.os}; Bun ${machine.bun}; ${new Date().toISOString()}`,
  )
  const base = process.argv.indexOf("--base")
  const lines = ["| package | installed by opencode | files | first request (install + load) |", "|---|---|---|---|"]
  if (base > 0) {
    const ref = process.argv[base + 1] ?? ""
    lines.push(row(`before (${ref})`, await installFootprint(packAt(ref, join(work, "base")))))
  }
  lines.push(row("this tree", await installFootprint(await packPlugin(join(work, "head")))))
  console.log(lines.join("\n"))
  const load = loadCost()
  const show = (c: LoadCost) => `median ${c.median.toFixed(1)} ms, fastest ${c.min.toFixed(1)} ms`
  console.log(
    `\nload (import in a fresh bun, ${LOAD_RUNS} runs each): source path ${show(load.source)}; built dist/index.js ${show(load.built)} (median ratio ${(load.built.median / load.source.median).toFixed(2)}×)`,
  )
} finally {
  rmSync(work, { recursive: true, force: true })
}
