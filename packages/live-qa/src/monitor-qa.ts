/**
 * One live QA setup: the scripted model, a real `opencode serve` whose only plugin is the LOCAL
 * opencode-monitor source (never the npm package), and a timeline of the bus. The packaging tests
 * pass `pluginSpec` to load this repo's own packed build the way users install it instead.
 */
import { writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { createOpencodeClient } from "@opencode-ai/sdk"
import { type EnvelopeNote, formatStatus, noteOf } from "../../opencode-monitor/src/codec.ts"
import { createProjectDir, type IsolatedDirs, type JsonObject, mergeConfig } from "./isolated-env.ts"
import { monitorAgent } from "./monitor-agent.ts"
import {
  disposeInstance,
  type OpencodeServer,
  type StartOpencodeOptions,
  type StopReport,
  startOpencode,
} from "./opencode-server.ts"
import { descendants, type PsEntry, psAll } from "./process-group.ts"
import { type Script, type ScriptedModel, startScriptedModel } from "./scripted-model.ts"
import { getMessages, type SessionMessage, startTimeline, type TimelineRecorder, waitFor } from "./timeline.ts"

export const PLUGIN_PATH = resolve(import.meta.dir, "../../opencode-monitor/src/index.ts")
/** The test-only entry with the process table forced to `ps` (src/ps-plugin.ts): the path of a system without /proc. */
export const PS_PLUGIN_PATH = resolve(import.meta.dir, "ps-plugin.ts")
/** The two process-table back ends, for the real-process live suites to run once each. */
export const PROCESS_TABLES: [string, string | undefined][] = [
  ["/proc", undefined],
  ["ps", PS_PLUGIN_PATH],
]
export const DEFAULT_MODEL = { providerID: "mock", modelID: "m" }

export interface MonitorQAOptions {
  pluginOptions?: JsonObject
  permission?: JsonObject
  config?: JsonObject
  script?: Script
  /** Delay of every scripted answer (a slow model keeps a turn running). */
  agentDelayMs?: number
  /** More local plugins loaded beside opencode-monitor (benchmark probes). */
  extraPlugins?: [string, JsonObject][]
  /** How opencode-monitor is listed in the config (default: the local source, PLUGIN_PATH): a packed build, or a test-only wrapper entry. */
  pluginSpec?: string
  /** Runs before the server starts (e.g. writing the isolated HOME's `.npmrc`). */
  prepare?: StartOpencodeOptions["prepare"]
  /** Runs once the server listens, before the first request to the project starts it (and installs its plugins). */
  onServer?: (server: OpencodeServer) => Promise<void>
  /** Run on the data of an earlier server (a restart); the caller removes the dirs. */
  dirs?: IsolatedDirs
  /** Extra environment of the server (e.g. SHELL). */
  env?: Record<string, string>
  /** The project dir's own `opencode.json`, merged over the server's config for that project. */
  projectConfig?: JsonObject
}

export interface Envelope {
  message: SessionMessage
  monitorId: string
  batch: number
  /** The status as the envelope's text says it (formatted from its note). */
  status: string
  text: string
  /** What the envelope says, as the plugin stored it: its text part's metadata. */
  note: EnvelopeNote
}

/** What stopping a project leaves: how its dispose went and the processes still alive after it. */
export interface ProjectStopReport {
  disposeOk: boolean
  disposeMs: number
  leftovers: PsEntry[]
}

/** A project on a real opencode server. */
export interface LiveProject {
  model: ScriptedModel
  server: OpencodeServer
  timeline: TimelineRecorder
  newSession(options?: { title?: string; parentID?: string }): Promise<string>
  /** A person's prompt; resolves when prompt_async accepted it. */
  prompt(sessionID: string, text: string, options?: { agent?: string; model?: typeof DEFAULT_MODEL }): Promise<number>
  messages(sessionID: string): Promise<SessionMessage[]>
  /** The monitor envelopes injected into a session, oldest first. */
  envelopes(sessionID: string): Promise<Envelope[]>
  /** The plugin's own log lines, as the server wrote them (each names a monitorId). */
  pluginLog(): string[]
  /**
   * Another project dir on the same server, with its own `opencode.json` (e.g. `permission`, `shell`)
   * and its own scripted model (the same script): a new project costs the server about a third of a
   * new server's CPU. The plugin options are the server's. The stop() of any project of a server
   * stops the server and all its projects. Its plugin log is the lines logged since it opened.
   */
  openProject(projectConfig?: JsonObject): Promise<MonitorQA>
  stop(): Promise<ProjectStopReport>
}

/** A project whose stop() stops its server, and so reports how the server's process group ended. */
export interface MonitorQA extends LiveProject {
  stop(): Promise<StopReport>
}

export async function startMonitorQA(options: MonitorQAOptions = {}): Promise<MonitorQA> {
  const script = options.script ?? monitorAgent({ delayMs: options.agentDelayMs })
  const model = startScriptedModel(script)
  let server: OpencodeServer
  try {
    server = await startOpencode({
      modelBaseURL: model.baseURL,
      plugins: [[options.pluginSpec ?? PLUGIN_PATH, options.pluginOptions ?? {}], ...(options.extraPlugins ?? [])],
      permission: options.permission ?? { bash: "allow" },
      config: options.config,
      prepare: (dirs) => {
        if (options.projectConfig) writeProjectConfig(dirs.project, options.projectConfig)
        options.prepare?.(dirs)
      },
      dirs: options.dirs,
      env: options.env,
    })
  } catch (error) {
    await model.stop()
    throw error
  }
  try {
    await options.onServer?.(server)
  } catch (error) {
    await server.stop()
    await model.stop()
    throw error
  }
  const projects: MonitorQA[] = []
  let opened = 0
  let stopping: Promise<StopReport> | undefined
  const stopAll = (timeline: TimelineRecorder) => {
    stopping ??= (async () => {
      let projectsDisposed = true
      for (const project of projects) {
        await project.timeline.stop()
        // The server's stop disposes its own project only; each project's monitors stop with its dispose.
        projectsDisposed = (await disposeInstance(server.url, project.server.directory)).ok && projectsDisposed
        await project.model.stop()
      }
      await timeline.stop()
      const report = await server.stop()
      await model.stop()
      // A failed dispose of any project is a failed stop, as the first project's is.
      return { ...report, disposeOk: report.disposeOk && projectsDisposed }
    })()
    return stopping
  }
  const qa: MonitorQA = await monitorQAOn(model, server, stopAll, {
    openProject: async (projectConfig = {}) => {
      const directory = join(server.dirs.root, `project-${++opened}`)
      const project: MonitorQA = await projectOn(server, directory, script, projectConfig, () => stopAll(qa.timeline))
      projects.push(project)
      return project
    },
  })
  return qa
}

/**
 * Servers shared by key: the first `project(key, …)` starts one with `options`, its project holding
 * `projectConfig`; later calls with the key open another project on it (a third of a server's CPU).
 */
export function sharedServers() {
  const byKey = new Map<string, Promise<MonitorQA>>()
  return {
    async project(key: string, options: MonitorQAOptions, projectConfig: JsonObject = {}): Promise<MonitorQA> {
      const running = byKey.get(key)
      if (running) return (await running).openProject(projectConfig)
      const starting = startMonitorQA({ ...options, projectConfig })
      byKey.set(key, starting)
      return starting
    },
    async stopAll(): Promise<void> {
      for (const starting of byKey.values())
        await (await starting.catch(() => undefined))?.stop().catch(() => undefined)
      byKey.clear()
    },
  }
}

/** What a test of a ProjectServer sets: the plugin's entry and options, and its project's opencode.json. */
export type ProjectOptions = Pick<
  MonitorQAOptions,
  "pluginOptions" | "pluginSpec" | "permission" | "config" | "script" | "agentDelayMs"
>

export interface ProjectServer {
  /** A new project dir whose opencode.json lists the plugin with these options (and the permission and config). */
  project(options?: ProjectOptions): Promise<LiveProject>
  /** Stops the server (after disposing any project still open). */
  stop(): Promise<StopReport>
}

/** How long a disposed project's processes (monitors, their watchdogs) get to end before they count as left over. */
const PROJECT_SETTLE_MS = 10_000

/**
 * One server for the tests of a file, each test a project of it: a new project costs the server
 * about a third of a new server's CPU. The server's own config lists no plugin; each project's
 * opencode.json lists opencode-monitor with that test's options, so every project runs its own
 * plugin instance with its own options. A project's stop() disposes that project only and reports the
 * server's child processes still alive after it, so tests of one server run one after another.
 */
export async function startProjectServer(): Promise<ProjectServer> {
  // Never called: every project's opencode.json names its own scripted model.
  const server = await startOpencode({ modelBaseURL: "http://127.0.0.1:9/v1", plugins: [] })
  const open = new Set<LiveProject>()
  let opened = 0
  return {
    async project(options = {}) {
      const plugin = [options.pluginSpec ?? PLUGIN_PATH, options.pluginOptions ?? {}]
      const projectConfig = mergeConfig(
        { plugin: [plugin], permission: options.permission ?? { bash: "allow" } },
        options.config ?? {},
      )
      const script = options.script ?? monitorAgent({ delayMs: options.agentDelayMs })
      const directory = join(server.dirs.root, `project-${++opened}`)
      let closing: Promise<ProjectStopReport> | undefined
      const project = await projectOn(server, directory, script, projectConfig, (self) => {
        open.delete(self)
        // Once: a second dispose would start the project's instance again just to dispose it.
        closing ??= closeProject(self)
        return closing
      })
      open.add(project)
      return project
    },
    async stop() {
      // A project that fails to stop must not keep the server running.
      for (const project of open) await project.stop().catch(() => undefined)
      return server.stop()
    },
  }
}

/** Dispose one project of a server, then wait for the server's children to end: what is left is the project's. */
async function closeProject(project: LiveProject): Promise<ProjectStopReport> {
  await project.timeline.stop()
  const disposed = await disposeInstance(project.server.url, project.server.directory)
  await project.model.stop()
  const alive = () => {
    const all = psAll()
    const children = descendants(project.server.pid, all)
    return all.filter((e) => children.has(e.pid) && !e.stat.startsWith("Z"))
  }
  // Judged by the wait's own look: a later look could catch the server forking for something else (git).
  const leftovers = await waitFor(() => (alive().length === 0 ? [] : undefined), PROJECT_SETTLE_MS, 100).catch(() =>
    alive(),
  )
  return { disposeOk: disposed.ok, disposeMs: disposed.ms, leftovers }
}

/** Another project dir of `server`, with its opencode.json and a scripted model of its own. */
async function projectOn<Report extends ProjectStopReport>(
  server: OpencodeServer,
  directory: string,
  script: Script,
  projectConfig: JsonObject,
  stop: (project: LiveProject) => Promise<Report>,
): Promise<ProjectWith<Report>> {
  createProjectDir(directory)
  // A scripted model of its own, so `model.scripted()` is this project's requests only.
  const own = startScriptedModel(script)
  writeProjectConfig(
    directory,
    mergeConfig({ provider: { mock: { options: { baseURL: own.baseURL } } } }, projectConfig),
  )
  const client = createOpencodeClient({ baseUrl: server.url, directory })
  // Its plugin log starts now: the lines before are other projects'.
  const logsFrom = server.logs.length
  const project: ProjectWith<Report> = await monitorQAOn(own, { ...server, directory, client }, () => stop(project), {
    logsFrom,
  })
  return project
}

/** `opencode.json` in a project dir: opencode merges it over the server's config for that project only. */
function writeProjectConfig(directory: string, config: JsonObject): void {
  writeFileSync(join(directory, "opencode.json"), `${JSON.stringify(config, null, 2)}\n`)
}

/** A project whose stop() reports `Report`. */
type ProjectWith<Report extends ProjectStopReport> = Omit<LiveProject, "stop"> & { stop(): Promise<Report> }

async function monitorQAOn<Report extends ProjectStopReport>(
  model: ScriptedModel,
  server: OpencodeServer,
  stop: (timeline: TimelineRecorder) => Promise<Report>,
  { openProject, logsFrom = 0 }: { openProject?: LiveProject["openProject"]; logsFrom?: number } = {},
): Promise<ProjectWith<Report>> {
  // The first request to a project starts its instance (config, plugins): as slow as a server's start.
  const timeline = await startTimeline(server, { connectTimeoutMs: 30_000 })
  const { client } = server

  const messages = (sessionID: string) => getMessages(client, sessionID)
  // Each server line is looked at once: tests poll pluginLog() every 20-100 ms, and a busy
  // server logs tens of thousands of lines (a full rescan of 30 000 costs ~2 ms).
  const pluginLines: string[] = []
  let scanned = logsFrom
  return {
    model,
    server,
    timeline,
    async newSession({ title = "monitor QA", parentID } = {}) {
      // A title skips title generation, so the small model is never called.
      const created = await client.session.create({ body: { title, ...(parentID ? { parentID } : {}) } })
      if (!created.data) throw new Error(`session.create failed: ${JSON.stringify(created.error)}`)
      return created.data.id
    },
    async prompt(sessionID, text, { agent = "build", model: m = DEFAULT_MODEL } = {}) {
      const sentAt = Date.now()
      const result = await client.session.promptAsync({
        path: { id: sessionID },
        body: { agent, model: m, parts: [{ type: "text", text }] },
      })
      if (result.response.status !== 204) throw new Error(`prompt_async answered ${result.response.status}`)
      return sentAt
    },
    messages,
    async envelopes(sessionID) {
      const out: Envelope[] = []
      for (const message of await messages(sessionID)) {
        if (message.info.role !== "user") continue
        // An injected envelope is a text part with the plugin's note: what opencode stored as data.
        for (const part of message.parts) {
          const note = part.type === "text" ? noteOf((part as { metadata?: unknown }).metadata) : undefined
          if (!note || part.type !== "text") continue
          const { monitorId, batch } = note
          out.push({ message, monitorId, batch, status: formatStatus(note.status), text: part.text ?? "", note })
        }
      }
      return out
    },
    pluginLog() {
      for (; scanned < server.logs.length; scanned++) {
        const text = server.logs[scanned]?.text ?? ""
        if (/monitorId=mon_|opencode-monitor is disabled/.test(text)) pluginLines.push(text)
      }
      return [...pluginLines]
    },
    openProject: openProject ?? (() => Promise.reject(new Error("open projects on the server's first MonitorQA"))),
    stop: () => stop(timeline),
  }
}

/** The plugin's tools must be in the first agent request, or the plugin did not load. */
/** The plugin's tools, sorted: what every install route must offer the model. */
export const MONITOR_TOOLS = ["monitor_list", "monitor_output", "monitor_restart", "monitor_start", "monitor_stop"]

export function toolNamesSeen(model: ScriptedModel): string[] {
  const first = model.scripted()[0]
  return (first?.request.tools ?? []).map((t) => t.function.name).filter((name) => name.startsWith("monitor_"))
}
