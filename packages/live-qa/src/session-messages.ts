/**
 * Fetch a session's messages and render them as a readable timeline.
 * Runtime message shapes are ahead of the v1 SDK types (e.g. assistant
 * `agent`), so this reads them through a loose local view instead of trusting
 * the generated types.
 */
import type { OpencodeClient } from "@opencode-ai/sdk"

export interface MessageInfoView {
  id: string
  role: "user" | "assistant"
  sessionID: string
  time: { created: number; completed?: number | null }
  agent?: string
  mode?: string
  parentID?: string
  finish?: string
  modelID?: string
  providerID?: string
  model?: { providerID: string; modelID: string }
  error?: { name?: string; data?: { message?: string } }
}

export interface PartView {
  id: string
  type: string
  text?: string
  synthetic?: boolean
  tool?: string
  callID?: string
  state?: {
    status?: string
    input?: unknown
    output?: string
    error?: string
    title?: string
    time?: { start?: number; end?: number }
  }
}

export interface SessionMessage {
  info: MessageInfoView
  parts: PartView[]
}

/** GET /session/{id}/message; `limit` keeps only the newest N messages (still oldest-first). */
export async function getMessages(
  client: OpencodeClient,
  sessionID: string,
  limit?: number,
): Promise<SessionMessage[]> {
  const result = await client.session.messages({
    path: { id: sessionID },
    ...(limit === undefined ? {} : { query: { limit } }),
  })
  if (result.error || !result.data) {
    throw new Error(`GET /session/${sessionID}/message failed: ${JSON.stringify(result.error)}`)
  }
  return result.data as unknown as SessionMessage[]
}

/** Joined text parts; "" for a missing message so assertions read `expect(textOf(x)).toBe(...)`. */
export function textOf(message: SessionMessage | undefined, includeSynthetic = true): string {
  if (!message) return ""
  return message.parts
    .filter((part) => part.type === "text" && (includeSynthetic || !part.synthetic))
    .map((part) => part.text ?? "")
    .join("\n")
}

export function lastAssistant(messages: SessionMessage[]): SessionMessage | undefined {
  return [...messages].reverse().find((message) => message.info.role === "assistant")
}

const firstLines = (text: string, lines: number, width: number) =>
  text
    .split("\n")
    .filter((line) => line.trim().length > 0)
    .slice(0, lines)
    .map((line) => (line.length > width ? `${line.slice(0, width)}…` : line))
    .join(" ⏎ ")

function renderPart(part: PartView): string | undefined {
  if (part.type === "text") {
    const flag = part.synthetic ? " [synthetic]" : ""
    return `    text${flag}: ${firstLines(part.text ?? "", 2, 120)}`
  }
  if (part.type === "tool") {
    const state = part.state ?? {}
    const input = JSON.stringify(state.input ?? {}).slice(0, 100)
    const result = state.status === "error" ? `error: ${state.error ?? ""}` : firstLines(state.output ?? "", 1, 80)
    return `    tool ${part.tool} (${state.status}) ${input} → ${result}`
  }
  // step-start / step-finish / snapshot carry no reading value in a timeline.
  return undefined
}

/** One header line per message plus one line per text/tool part; times relative to the first message. */
export function renderMessages(messages: SessionMessage[]): string {
  const origin = messages[0]?.info.time.created ?? 0
  const rel = (t: number | null | undefined) => (t ? `+${((t - origin) / 1000).toFixed(3)}s` : "-")
  const out: string[] = []
  for (const { info, parts } of messages) {
    const synthetic = parts.some((part) => part.type === "text" && part.synthetic) ? " synthetic" : ""
    if (info.role === "user") {
      const model = info.model ? `${info.model.providerID}/${info.model.modelID}` : "-"
      out.push(`${rel(info.time.created)} user ${info.id} agent=${info.agent ?? "-"} model=${model}${synthetic}`)
    } else {
      const error = info.error ? ` error=${info.error.name}:${info.error.data?.message ?? ""}` : ""
      out.push(
        `${rel(info.time.created)} assistant ${info.id} agent=${info.agent ?? info.mode ?? "-"} ` +
          `model=${info.providerID}/${info.modelID} finish=${info.finish ?? "-"} ` +
          `completed=${rel(info.time.completed)} parent=${info.parentID ?? "-"}${error}`,
      )
    }
    for (const part of parts) {
      const line = renderPart(part)
      if (line) out.push(line)
    }
  }
  return out.join("\n")
}

export async function renderSessionTimeline(client: OpencodeClient, sessionID: string): Promise<string> {
  return renderMessages(await getMessages(client, sessionID))
}
