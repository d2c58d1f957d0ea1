/**
 * Start a real `opencode serve`, isolated and offline, wired to a scripted
 * model; stop it so that nothing it started survives the test.
 */
import { writeFileSync } from "node:fs"
import { createOpencodeClient, type OpencodeClient } from "@opencode-ai/sdk"
import { freePort } from "./free-port.ts"
import {
  createIsolatedDirs,
  type IsolatedDirs,
  isolatedEnv,
  type JsonObject,
  mergeConfig,
  opencodeBinary,
  removeIsolatedDirs,
} from "./isolated-env.ts"
import { serverActivity } from "./wait.ts"
import { crashGroup, type GroupProcess, type KillReport, killGroup, type LogLine, spawnGroup } from "./process-group.ts"

export type { LogLine } from "./process-group.ts"

/** A plugin spec (a local file's absolute path, or an npm spec like `name@file:/x.tgz`), optionally with its options object. */
export type PluginSpec = string | [string, JsonObject]

export interface StartOpencodeOptions {
  /** Base URL of the OpenAI-compatible model server, ending in `/v1`. */
  modelBaseURL: string
  plugins?: PluginSpec[]
  /** opencode `permission` config, e.g. `{ bash: "allow" }`. */
  permission?: JsonObject
  /** Deep-merged over the generated config last (agents, extra settings). */
  config?: JsonObject
  env?: Record<string, string>
  /** opencode --log-level; INFO by default (DEBUG shows plugin load failures in more detail). */
  logLevel?: "DEBUG" | "INFO" | "WARN" | "ERROR"
  /** Max wait for the "listening" line. */
  startTimeoutMs?: number
  /** Runs after the isolated dirs exist and before the server starts (e.g. to write `home/.npmrc`). */
  prepare?: (dirs: IsolatedDirs) => void
  /** Keep the temp dirs after stop() (debugging). Also LIVE_QA_KEEP=1. */
  keepTemp?: boolean
  /** Run on these dirs (the data of an earlier server: a restart); the caller removes them. */
  dirs?: IsolatedDirs
}

export interface StopReport extends KillReport {
  disposeOk: boolean
  disposeMs: number
}

export interface OpencodeServer {
  url: string
  port: number
  pid: number
  /** The git-initialised project dir the server runs in. */
  directory: string
  dirs: IsolatedDirs
  client: OpencodeClient
  /** Live array of output lines. */
  logs: LogLine[]
  /** Milliseconds from spawn to the "listening" line. */
  startupMs: number
  waitForLog(pattern: RegExp, timeoutMs?: number): Promise<LogLine>
  /** Dispose, SIGTERM the group, SIGKILL after a grace, verify with ps, remove temp dirs. Idempotent. */
  stop(): Promise<StopReport>
  /** SIGKILL the server's group with no dispose, as a crash would; the dirs stay for a restart. */
  crash(): Promise<void>
}

const LISTENING = /opencode server listening on (http:\/\/127\.0\.0\.1:(\d+))/

export function buildConfig(opts: StartOpencodeOptions): JsonObject {
  const base: JsonObject = {
    $schema: "https://opencode.ai/config.json",
    autoupdate: false,
    share: "disabled",
    snapshot: false,
    lsp: false,
    formatter: false,
    provider: {
      mock: {
        npm: "@ai-sdk/openai-compatible",
        name: "Scripted mock",
        options: { baseURL: opts.modelBaseURL, apiKey: "x" },
        models: { m: { name: "m", tool_call: true, limit: { context: 128000, output: 4096 } } },
      },
    },
    model: "mock/m",
    small_model: "mock/m",
    enabled_providers: ["mock"],
    plugin: opts.plugins ?? [],
  }
  if (opts.permission) base.permission = opts.permission
  return opts.config ? mergeConfig(base, opts.config) : base
}

function tail(lines: LogLine[], count: number): string {
  return lines
    .slice(-count)
    .map((line) => `[${line.source}] ${line.text}`)
    .join("\n")
}

function waitForLine(child: GroupProcess, pattern: RegExp, timeoutMs: number, what: string): Promise<LogLine> {
  const existing = child.lines.find((line) => pattern.test(line.text))
  if (existing) return Promise.resolve(existing)
  return new Promise((resolve, reject) => {
    const stop = () => {
      clearTimeout(timer)
      unsubscribe()
    }
    const timer = setTimeout(() => {
      stop()
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; output tail:\n${tail(child.lines, 30)}`))
    }, timeoutMs)
    const unsubscribe = child.onLine((line) => {
      if (!pattern.test(line.text)) return
      stop()
      resolve(line)
    })
    // If the process dies first, fail now with its last words instead of waiting out the timeout.
    void child.proc.exited.then((code) => {
      setTimeout(() => {
        if (child.lines.some((line) => pattern.test(line.text))) return
        stop()
        reject(new Error(`opencode exited (code ${code}) before ${what}; output tail:\n${tail(child.lines, 30)}`))
      }, 100)
    })
  })
}

/** POST /instance/dispose for one project dir: its plugins' dispose hooks run. Bounded, never throws. */
export async function disposeInstance(url: string, directory: string): Promise<{ ok: boolean; ms: number }> {
  const started = Date.now()
  try {
    const response = await fetch(`${url}/instance/dispose?directory=${encodeURIComponent(directory)}`, {
      method: "POST",
      headers: { "x-opencode-directory": encodeURIComponent(directory) },
      // Bounded: a wedged plugin dispose must not hang teardown; signals follow regardless.
      signal: AbortSignal.timeout(5000),
    })
    await response.body?.cancel()
    return { ok: response.ok, ms: Date.now() - started }
  } catch {
    return { ok: false, ms: Date.now() - started }
  }
}

export async function startOpencode(opts: StartOpencodeOptions): Promise<OpencodeServer> {
  const dirs = opts.dirs ?? createIsolatedDirs()
  const keep = opts.dirs !== undefined || opts.keepTemp === true || process.env.LIVE_QA_KEEP === "1"
  writeFileSync(dirs.configFile, `${JSON.stringify(buildConfig(opts), null, 2)}\n`)
  opts.prepare?.(dirs)
  const port = await freePort()
  const cmd = [
    opencodeBinary(),
    "serve",
    "--hostname",
    "127.0.0.1",
    "--port",
    String(port),
    "--print-logs",
    "--log-level",
    opts.logLevel ?? "INFO",
  ]
  const spawnedAt = Date.now()
  const child = spawnGroup(cmd, dirs.project, isolatedEnv(dirs, opts.env))
  // A log line is a sign of change: a test waiting on this server looks again (see waitFor).
  child.onLine(() => serverActivity())

  let listening: LogLine
  try {
    listening = await waitForLine(child, LISTENING, opts.startTimeoutMs ?? 30_000, "the listening line")
  } catch (err) {
    await killGroup(child, 1000)
    if (!keep) removeIsolatedDirs(dirs)
    throw err
  }
  const url = listening.text.match(LISTENING)?.[1] ?? `http://127.0.0.1:${port}`
  const client = createOpencodeClient({ baseUrl: url, directory: dirs.project })

  let stopping: Promise<StopReport> | undefined
  const stop = () => {
    stopping ??= (async () => {
      const disposed = await disposeInstance(url, dirs.project)
      const killed = await killGroup(child, 5000)
      if (!keep) removeIsolatedDirs(dirs)
      return { ...killed, disposeOk: disposed.ok, disposeMs: disposed.ms }
    })()
    return stopping
  }

  return {
    url,
    port,
    pid: child.pid,
    directory: dirs.project,
    dirs,
    client,
    logs: child.lines,
    startupMs: listening.at - spawnedAt,
    waitForLog: (pattern, timeoutMs = 10_000) => waitForLine(child, pattern, timeoutMs, `log ${pattern}`),
    stop,
    crash: () => crashGroup(child),
  }
}
