import type { ModelRef, SessionMessage } from "./session-api"

export type GateInput = {
  sessionID: string
  busy: Record<string, string>
  messages: SessionMessage[]
  now: number
  userMessageWindowMs: number
}

export type GateDecision =
  | { open: true; agent: string | undefined; model: ModelRef | undefined }
  | { open: false; reason: string; agent: string | undefined; model: ModelRef | undefined }

/**
 * Decides from the target session's own state whether output may be injected now (SPEC §4):
 * idle, latest assistant turn finished, no real user message within the window. Also returns
 * the agent and model of the latest real user message, which every injected prompt must carry.
 */
export function evaluateGates(input: GateInput): GateDecision {
  const { messages } = input
  const lastUser = findLast(messages, (m) => m.role === "user" && !m.synthetic)
  const lastAssistant = findLast(messages, (m) => m.role === "assistant")
  const identity = { agent: lastUser?.agent, model: lastUser?.model }
  const status = input.busy[input.sessionID]
  if (status !== undefined) return { open: false, reason: `session ${status}`, ...identity }
  if (lastAssistant && lastAssistant.completed === undefined) {
    return { open: false, reason: "assistant turn still running", ...identity }
  }
  if (lastAssistant?.finish === "tool-calls" && lastAssistant.toolRunning) {
    return { open: false, reason: "tool call still running", ...identity }
  }
  if (lastUser && input.now - lastUser.created < input.userMessageWindowMs) {
    return { open: false, reason: "user message within user_message_window_ms", ...identity }
  }
  return { open: true, ...identity }
}

function findLast<T>(items: readonly T[], predicate: (item: T) => boolean): T | undefined {
  for (let i = items.length - 1; i >= 0; i--) {
    const item = items[i] as T
    if (predicate(item)) return item
  }
  return undefined
}
