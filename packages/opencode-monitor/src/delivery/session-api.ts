import type { PluginInput } from "@opencode-ai/plugin"
import type { Message, Part } from "@opencode-ai/sdk"
import { type EnvelopeNote, noteOf, START_TOOLS } from "../codec"
import { errorText } from "../errors"
import { LOG_SERVICE, type LogSink } from "../log"

type OpencodeClient = PluginInput["client"]

export type ModelRef = { providerID: string; modelID: string }

/** The little of a session message that delivery decisions need. */
export type SessionMessage = {
  role: "user" | "assistant"
  created: number
  /** Assistant only: undefined while the step runs. */
  completed?: number
  finish?: string
  /** Assistant only: a tool call of this message is still pending or running. */
  toolRunning?: boolean
  /** User only: every text part was injected (ours, or opencode's own), not typed by a person. */
  synthetic?: boolean
  agent: string | undefined
  model: ModelRef | undefined
  /** User only: the notes of this plugin's envelopes in it (their text parts' metadata). */
  notes: EnvelopeNote[]
  /** Assistant only: the monitor ids its completed start tools returned (restart recovery's proof). */
  startedMonitors?: string[]
}

export type PromptRequest = {
  noReply: boolean
  agent: string | undefined
  model: ModelRef | undefined
  text: string
  metadata: Record<string, unknown>
}

/**
 * `gone`: the session no longer exists. `rejected`: the server answered with an error, nothing
 * was stored. `ambiguous`: the request may have reached the server but no answer came back.
 */
export class DeliveryError extends Error {
  override name = "DeliveryError"
  constructor(
    readonly kind: "gone" | "rejected" | "ambiguous",
    message: string,
  ) {
    super(message)
  }
}

export type ToastVariant = "info" | "success" | "warning" | "error"

/** Everything the plugin asks of the opencode server, in one place (and where log lines go). */
export interface SessionApi extends LogSink {
  /** Sessions that are not idle, with their status type (idle sessions are absent). */
  busySessions(): Promise<Record<string, string>>
  /** The session's newest `limit` messages, oldest first. Throws `DeliveryError("gone")` on 404. */
  recentMessages(sessionID: string, limit: number): Promise<SessionMessage[]>
  prompt(sessionID: string, request: PromptRequest): Promise<void>
  parentOf(sessionID: string): Promise<string | undefined>
  /** False when the session is gone (404), undefined when the server could not say. */
  sessionExists(sessionID: string): Promise<boolean | undefined>
  toast(variant: ToastVariant, title: string, message: string): void
}

export function createSessionApi(client: OpencodeClient): SessionApi {
  return {
    async busySessions() {
      const result = await client.session.status()
      if (result.error || !result.data) throw readError("GET /session/status", result)
      return Object.fromEntries(Object.entries(result.data).map(([id, status]) => [id, status.type]))
    },
    async recentMessages(sessionID, limit) {
      const result = await client.session.messages({ path: { id: sessionID }, query: { limit } })
      if (result.error || !result.data) throw readError(`GET /session/${sessionID}/message`, result)
      return result.data.map(({ info, parts }) => toSessionMessage(info, parts))
    },
    async prompt(sessionID, request) {
      const result = await client.session
        .promptAsync({
          path: { id: sessionID },
          body: {
            noReply: request.noReply,
            ...(request.agent ? { agent: request.agent } : {}),
            ...(request.model ? { model: request.model } : {}),
            parts: [{ type: "text", text: request.text, synthetic: true, metadata: request.metadata }],
          },
        })
        .catch((error) => {
          throw new DeliveryError("ambiguous", errorText(error))
        })
      const failure = "error" in result ? result.error : undefined
      if (!failure) return
      const status = "response" in result ? result.response?.status : undefined
      throw new DeliveryError(status === 404 ? "gone" : "rejected", `HTTP ${status}: ${errorText(failure)}`)
    },
    async parentOf(sessionID) {
      const result = await client.session.get({ path: { id: sessionID } })
      if (result.error || !result.data) throw readError(`GET /session/${sessionID}`, result)
      return result.data.parentID || undefined
    },
    async sessionExists(sessionID) {
      const result = await client.session.get({ path: { id: sessionID } }).catch(() => undefined)
      if (result?.data) return true
      return result?.response?.status === 404 ? false : undefined
    },
    log(level, message, extra, service = LOG_SERVICE) {
      client.app.log({ body: { service, level, message, extra } }).catch(() => {})
    },
    toast(variant, title, message) {
      client.tui.showToast({ body: { title, message, variant } }).catch(() => {})
    },
  }
}

function toSessionMessage(info: Message, parts: Part[]): SessionMessage {
  const texts = parts.filter((p): p is Extract<Part, { type: "text" }> => p.type === "text")
  if (info.role === "user") {
    return {
      role: "user",
      created: info.time.created,
      synthetic: texts.length > 0 && texts.every((p) => p.synthetic === true),
      agent: info.agent,
      model: info.model,
      notes: texts.flatMap((p) => noteOf(p.metadata) ?? []),
    }
  }
  return {
    role: "assistant",
    created: info.time.created,
    completed: info.time.completed,
    finish: info.finish,
    toolRunning: parts.some((p) => p.type === "tool" && (p.state.status === "pending" || p.state.status === "running")),
    agent: info.mode,
    model: { providerID: info.providerID, modelID: info.modelID },
    notes: [],
    startedMonitors: startedMonitors(parts),
  }
}

/** Ids from this plugin's own `monitor_start` and `monitor_restart` results: tool metadata. */
function startedMonitors(parts: Part[]): string[] {
  return parts.flatMap((part) => {
    if (part.type !== "tool" || !START_TOOLS.has(part.tool) || part.state.status !== "completed") return []
    const id = (part.state.metadata as { monitorId?: unknown } | undefined)?.monitorId
    return typeof id === "string" ? [id] : []
  })
}

/** A failed read: `gone` when the session does not exist (404), a plain error otherwise. */
function readError(what: string, result: { error?: unknown; response?: Response }): Error {
  const message = `${what} failed: ${errorText(result.error ?? "no data")}`
  return result.response?.status === 404 ? new DeliveryError("gone", message) : new Error(message)
}
