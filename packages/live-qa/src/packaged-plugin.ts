/**
 * Helpers for the packaging scenarios: the README's install line, the global event bus (where
 * opencode reports plugin install failures), what opencode installed on disk, and the
 * terminal-wake scenario run through whatever build of the plugin the server loaded.
 */
import { existsSync, lstatSync, readdirSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { type BusEvent, readEvents } from "./event-stream.ts"
import type { JsonObject } from "./isolated-env.ts"
import { exitReport, QA_PROMPT } from "./monitor-agent.ts"
import type { LiveProject } from "./monitor-qa.ts"
import type { OpencodeServer } from "./opencode-server.ts"
import { waitForEnvelope, waitForReply } from "./scenario.ts"
import { waitFor } from "./wait.ts"

export const README_PATH = resolve(import.meta.dir, "../../../README.md")

/** The JSON blocks of a README's "## Install into opencode" section, verbatim, in order. */
function installBlocks(readme: string): string[] {
  const start = readme.indexOf("## Install into opencode")
  if (start < 0) throw new Error('the README has no "## Install into opencode" section')
  const end = readme.indexOf("\n## ", start + 1)
  const section = readme.slice(start, end < 0 ? undefined : end)
  return [...section.matchAll(/```json\n([\s\S]*?)```/g)].map((block) => block[1] as string)
}

/** The first JSON block of a README's "## Install into opencode" section (opencode.json), verbatim. */
export function installBlock(readme: string): string {
  const [block] = installBlocks(readme)
  if (!block) throw new Error('the README\'s "## Install into opencode" section has no ```json block')
  return block
}

/** The plugin list of the README's second install block, the one for tui.json. */
export function readmeTuiPlugins(readme = readFileSync(README_PATH, "utf8")): string[] {
  const block = installBlocks(readme)[1]
  if (!block) throw new Error('the README\'s "## Install into opencode" section has no second ```json block (tui.json)')
  const plugins = (JSON.parse(block) as { plugin?: unknown }).plugin
  if (!Array.isArray(plugins) || !plugins.every((entry) => typeof entry === "string"))
    throw new Error(`the README's tui.json block has no list of plugin names: ${block}`)
  return plugins
}

/** The plugin entry of the README's install line, as [spec, options]. */
export function readmeInstallEntry(readme = readFileSync(README_PATH, "utf8")): [string, JsonObject] {
  const config = JSON.parse(installBlock(readme)) as { plugin?: unknown[] }
  const entry = config.plugin?.[0]
  if (typeof entry === "string") return [entry, {}]
  if (Array.isArray(entry) && typeof entry[0] === "string") return [entry[0], (entry[1] ?? {}) as JsonObject]
  throw new Error(`the README's install line has no plugin entry: ${JSON.stringify(config)}`)
}

/**
 * The first request to the project, with room for opencode to install and load its plugins before
 * it answers (a loaded machine needs seconds); returns the tool ids the server then offers.
 */
export async function firstProjectRequest(server: OpencodeServer, timeoutMs = 120_000): Promise<string[]> {
  const response = await fetch(
    `${server.url}/experimental/tool/ids?directory=${encodeURIComponent(server.directory)}`,
    {
      headers: { "x-opencode-directory": encodeURIComponent(server.directory) },
      signal: AbortSignal.timeout(timeoutMs),
    },
  ).catch((error: unknown) => {
    throw new Error(
      `the first request to the project got no answer within ${timeoutMs} ms (${error}): opencode waits for its plugin installs, so look for a registry it cannot reach`,
    )
  })
  if (!response.ok) throw new Error(`GET /experimental/tool/ids answered ${response.status}: ${await response.text()}`)
  return (await response.json()) as string[]
}

export const monitorTools = (ids: string[]) => ids.filter((id) => id.startsWith("monitor_")).sort()

export interface GlobalEvents {
  events: BusEvent[]
  stop(): Promise<void>
}

/** Subscribes to `GET /global/event` and resolves once it is live. */
export async function watchGlobalEvents(url: string): Promise<GlobalEvents> {
  const events: BusEvent[] = []
  const controller = new AbortController()
  const reading = readEvents(url, "", controller.signal, (event) => events.push(event), "/global/event").catch(
    (error: unknown) => {
      if (!controller.signal.aborted) console.error("[global events] stream failed:", error)
    },
  )
  await waitFor(() => events.some((e) => e.type === "server.connected"), 10_000, 20, "GET /global/event to connect")
  return {
    events,
    async stop() {
      controller.abort()
      await reading
    },
  }
}

/**
 * Where opencode installed an npm spec: `$XDG_CACHE_HOME/opencode/packages/<spec>/node_modules/<name>`
 * (a `file:` spec's path becomes nested folders, so `<spec>` may be several levels deep).
 */
export function installedPackage(cacheHome: string, name: string): { specDir: string; packageDir: string } {
  const packages = join(cacheHome, "opencode", "packages")
  const search = (dir: string, depth: number): string | undefined => {
    if (existsSync(join(dir, "node_modules", name, "package.json"))) return dir
    if (depth === 0 || !existsSync(dir)) return undefined
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (!entry.isDirectory() || entry.name === "node_modules") continue
      const found = search(join(dir, entry.name), depth - 1)
      if (found) return found
    }
    return undefined
  }
  const specDir = search(packages, 12)
  if (!specDir) throw new Error(`opencode installed no ${name} under ${packages}`)
  return { specDir, packageDir: join(specDir, "node_modules", name) }
}

export interface Footprint {
  bytes: number
  files: number
  /** Bytes of `.wasm` files (the shell grammar, allowed on top). */
  wasmBytes: number
}

/** Apparent size of every regular file under `dir` (what the install put on disk). */
export function footprint(dir: string): Footprint {
  const total: Footprint = { bytes: 0, files: 0, wasmBytes: 0 }
  for (const name of readdirSync(dir)) {
    const path = join(dir, name)
    const stat = lstatSync(path)
    if (stat.isDirectory()) {
      const inner = footprint(path)
      total.bytes += inner.bytes
      total.files += inner.files
      total.wasmBytes += inner.wasmBytes
    } else if (stat.isFile()) {
      total.bytes += stat.size
      total.files += 1
      if (name.endsWith(".wasm")) total.wasmBytes += stat.size
    }
  }
  return total
}

/**
 * The terminal-wake scenario through whatever build the server loaded: the agent starts a monitor
 * whose command prints a line and exits 7; with no human input the session wakes and the agent
 * reports the exit code.
 */
export async function expectTerminalWakeReport(qa: LiveProject): Promise<string> {
  const sessionID = await qa.newSession()
  await qa.prompt(sessionID, QA_PROMPT)
  const wake = await waitForEnvelope(qa, sessionID, (e) => e.status !== "running", "the terminal envelope", 60_000)
  const report = exitReport({ monitorId: wake.monitorId, label: "qa-build", status: "exited (code=7)" })
  await waitForReply(qa, sessionID, wake.message.info.id, (text) => text === report, "the agent's exit report", 60_000)
  return report
}
