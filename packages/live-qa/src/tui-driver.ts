/**
 * A real opencode TUI under tmux, isolated and offline like `startOpencode`: the person's-eye
 * view. `opencode <project>` runs its own server in-process; the scripted model answers; local
 * plugins come from opencode.json (server part) and `$XDG_CONFIG_HOME/opencode/tui.json` (TUI
 * part). Each driver uses its own tmux server socket, so parallel tests never share a session.
 */
import { writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { createOpencodeClient, type OpencodeClient } from "@opencode-ai/sdk"
import { freePort } from "./free-port.ts"
import {
  createIsolatedDirs,
  type IsolatedDirs,
  isolatedEnv,
  opencodeBinary,
  removeIsolatedDirs,
} from "./isolated-env.ts"
import { buildConfig, type PluginSpec } from "./opencode-server.ts"
import { descendants, type PsEntry, psAll } from "./process-group.ts"
import { sleep } from "./wait.ts"

export interface StartTuiOptions {
  modelBaseURL: string
  /** Server plugins (opencode.json `plugin`). */
  plugins?: PluginSpec[]
  /** TUI plugins (tui.json `plugin`): absolute paths or npm specs (`name`, `name@file:/x.tgz`). */
  tuiPlugins?: string[]
  /** Runs after the isolated dirs exist and before opencode starts (e.g. to write `home/.npmrc`). */
  prepare?: (dirs: IsolatedDirs) => void
  permission?: Record<string, unknown>
  width?: number
  height?: number
  /** More `opencode` arguments (e.g. `--prompt <text>`). */
  args?: string[]
  /**
   * Attach to this running server (`opencode attach <url> --session <id>`) instead of starting one:
   * the TUI's own HOME/XDG dirs then differ from the server's, as on another machine.
   */
  attach?: { url: string; directory: string; sessionID: string }
}

export interface TuiDriver {
  dirs: IsolatedDirs
  /** The opencode process (the pane's command). */
  pid: number
  /** Its server (in-process on a free port, or the attached one), for reading the session's messages. */
  url: string
  client: OpencodeClient
  /** The screen as text, one string (rows joined by \n). */
  capture(): string
  /** tmux send-keys arguments, e.g. ("hello", "Enter") or ("C-p"). */
  keys(...keys: string[]): void
  /** Types text literally (no key names). */
  type(text: string): void
  /** Polls the screen until `test` holds; returns the matching screen. */
  waitForScreen(test: (screen: string) => boolean, timeoutMs: number, what: string): Promise<string>
  /** Processes below opencode right now. */
  children(): PsEntry[]
  stop(): Promise<void>
}

/** The local TUI part of opencode-monitor (listed in tui.json by the live tests). */
export const TUI_PLUGIN_PATH = resolve(import.meta.dir, "../../opencode-monitor/src/tui/index.ts")

// On a 160-column screen the session sidebar starts at about column 116.
const SIDEBAR_FROM = 116

/** The right-hand sidebar column of a captured screen, empty rows dropped. */
export function sidebarOf(screen: string): string {
  return screen
    .split("\n")
    .map((row) => row.slice(SIDEBAR_FROM).trimEnd())
    .filter((row) => row.trim() !== "")
    .join("\n")
}

/** ctrl+p, type "Monitors", Enter: the opencode-monitor dialog opens. */
export async function openMonitorsDialog(driver: TuiDriver): Promise<void> {
  driver.keys("C-p")
  await driver.waitForScreen((screen) => screen.includes("Commands"), 30_000, "the command palette")
  driver.type("Monitors")
  await driver.waitForScreen((screen) => /Monitors\s+Background monitors/.test(screen), 30_000, "the Monitors command")
  driver.keys("Enter")
}

export function hasTmux(): boolean {
  return Bun.spawnSync({ cmd: ["sh", "-c", "command -v tmux"] }).exitCode === 0
}

export async function startTui(opts: StartTuiOptions): Promise<TuiDriver> {
  const dirs = createIsolatedDirs("oc-tui-")
  writeFileSync(
    dirs.configFile,
    `${JSON.stringify(buildConfig({ modelBaseURL: opts.modelBaseURL, plugins: opts.plugins, permission: opts.permission }), null, 2)}\n`,
  )
  writeFileSync(
    join(dirs.config, "opencode", "tui.json"),
    `${JSON.stringify({ plugin: opts.tuiPlugins ?? [] }, null, 2)}\n`,
  )
  opts.prepare?.(dirs)
  const socket = `omo-tui-${process.pid}-${Math.random().toString(36).slice(2, 8)}`
  const env = { ...isolatedEnv(dirs), TERM: "xterm-256color", COLORTERM: "truecolor", LANG: "C.UTF-8" }
  const tmux = (...args: string[]) => {
    const result = Bun.spawnSync({ cmd: ["tmux", "-u", "-L", socket, ...args], env })
    if (result.exitCode !== 0) throw new Error(`tmux ${args[0]} failed: ${result.stderr.toString()}`)
    return result.stdout.toString()
  }
  const port = await freePort()
  const envArgs = Object.entries(env).flatMap(([key, value]) => ["-e", `${key}=${value}`])
  tmux(
    "new-session",
    "-d",
    "-x",
    String(opts.width ?? 160),
    "-y",
    String(opts.height ?? 48),
    ...envArgs,
    "-c",
    dirs.project,
    opencodeBinary(),
    ...(opts.attach
      ? ["attach", opts.attach.url, "--dir", opts.attach.directory, "--session", opts.attach.sessionID]
      : [dirs.project, "--port", String(port)]),
    ...(opts.args ?? []),
  )
  tmux("set-option", "-g", "remain-on-exit", "on")
  const pid = Number(tmux("display-message", "-p", "#{pane_pid}").trim())

  const capture = () => tmux("capture-pane", "-p", "-J")
  let stopped = false
  const url = opts.attach?.url ?? `http://127.0.0.1:${port}`
  return {
    dirs,
    pid,
    url,
    client: createOpencodeClient({ baseUrl: url, directory: opts.attach?.directory ?? dirs.project }),
    capture,
    keys: (...keys) => {
      tmux("send-keys", ...keys)
    },
    type: (text) => {
      tmux("send-keys", "-l", text)
    },
    async waitForScreen(test, timeoutMs, what) {
      const deadline = Date.now() + timeoutMs
      let screen = ""
      for (;;) {
        screen = capture()
        if (test(screen)) return screen
        if (Date.now() >= deadline)
          throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; screen:\n${screen}`)
        await sleep(100)
      }
    },
    children: () => {
      const below = descendants(pid)
      return psAll().filter((entry) => below.has(entry.pid))
    },
    async stop() {
      if (stopped) return
      stopped = true
      const below = [...descendants(pid)]
      try {
        process.kill(pid, "SIGTERM")
      } catch {}
      for (let i = 0; i < 50 && alive(pid); i++) await sleep(100)
      for (const p of [pid, ...below]) {
        try {
          process.kill(p, "SIGKILL")
        } catch {}
      }
      try {
        tmux("kill-server")
      } catch {}
      if (process.env.LIVE_QA_KEEP !== "1") removeIsolatedDirs(dirs)
    },
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
