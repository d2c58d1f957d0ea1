import type { ModelRef, SessionMessage } from "./session-api"

export type GateInput = {
  sessionID: string
  busy: Record<string, string>
  messages: SessionMessage[]
  now: number
  user_message_window_ms: number
  /** An unfinished assistant message older than this was cut off by a crash: it never completes. */
  staleTurnsBefore?: number
}

/** The agent and model a person last chose in a session; injected prompts must carry them. */
export type Identity = { agent: string | undefined; model: ModelRef | undefined }

export type GateDecision = { open: true } | { open: false; reason: string }

const newest = (messages: readonly SessionMessage[], is: (m: SessionMessage) => boolean) =>
  [...messages].reverse().find(is)
/** A real (typed, not injected) user message. */
const typed = (m: SessionMessage) => m.role === "user" && !m.synthetic

/** The latest real user message's agent and model; undefined when there is none. */
export function latestUserIdentity(messages: readonly SessionMessage[]): Identity | undefined {
  const lastUser = newest(messages, typed)
  return lastUser ? { agent: lastUser.agent, model: lastUser.model } : undefined
}

/** Output may go in when the session is idle, its turn finished and nobody just wrote; other sessions never count. */
export function evaluateGates(input: GateInput): GateDecision {
  const lastUser = newest(input.messages, typed)
  const lastAssistant = newest(
    input.messages,
    (m) =>
      m.role === "assistant" &&
      !(m.completed === undefined && m.created < (input.staleTurnsBefore ?? Number.NEGATIVE_INFINITY)),
  )
  const status = input.busy[input.sessionID]
  if (status !== undefined) return { open: false, reason: `session ${status}` }
  if (lastAssistant && lastAssistant.completed === undefined) {
    return { open: false, reason: "assistant turn still running" }
  }
  if (lastAssistant?.finish === "tool-calls" && lastAssistant.toolRunning) {
    return { open: false, reason: "tool call still running" }
  }
  if (lastUser && input.now - lastUser.created < input.user_message_window_ms) {
    return { open: false, reason: "user message within user_message_window_ms" }
  }
  return { open: true }
}
