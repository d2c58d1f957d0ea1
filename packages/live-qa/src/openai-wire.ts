/**
 * OpenAI chat-completions wire format: the subset of request fields scripts
 * need, and builders for streaming / non-streaming response bodies.
 * Kept apart from the HTTP server so the format can be unit-tested alone.
 */

export interface ChatContentPart {
  type: string
  text?: string
}

export interface ChatToolCall {
  id: string
  type: "function"
  function: { name: string; arguments: string }
}

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool"
  content: string | ChatContentPart[] | null
  tool_calls?: ChatToolCall[]
  tool_call_id?: string
}

export interface ChatTool {
  type: "function"
  function: { name: string; description?: string; parameters?: unknown }
}

export interface ChatRequest {
  model: string
  messages: ChatMessage[]
  /** Undefined when the request carried no tools (title generation, summaries). */
  tools: ChatTool[] | undefined
  stream: boolean
  /** The whole parsed body, for assertions on fields not modelled here. */
  raw: Record<string, unknown>
}

export interface ToolCallSpec {
  name: string
  arguments: Record<string, unknown>
}

/** `delayMs` holds the answer back after the first chunk, to make the model slow. */
export type ScriptReply = ({ text: string } | { toolCalls: ToolCallSpec[] }) & { delayMs?: number }

// ---- helpers for scripts -------------------------------------------------

export function messageText(message: ChatMessage): string {
  if (typeof message.content === "string") return message.content
  if (!Array.isArray(message.content)) return ""
  return message.content
    .filter((part) => part.type === "text" && typeof part.text === "string")
    .map((part) => part.text)
    .join("\n")
}

export function lastMessage(request: ChatRequest): ChatMessage | undefined {
  return request.messages[request.messages.length - 1]
}

/** Text of the newest user message; opencode sends injected synthetic parts as user messages too. */
export function lastUserText(request: ChatRequest): string {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const message = request.messages[i]
    if (message?.role === "user") return messageText(message)
  }
  return ""
}

/** Tool results after the last assistant message, i.e. what the model is being asked to react to. */
export function toolResults(request: ChatRequest): { toolCallId: string; text: string }[] {
  const results: { toolCallId: string; text: string }[] = []
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const message = request.messages[i]
    if (message?.role !== "tool") break
    results.unshift({ toolCallId: message.tool_call_id ?? "", text: messageText(message) })
  }
  return results
}

// ---- response builders ---------------------------------------------------

let callCounter = 0
const nextCallId = () => `call_${Date.now().toString(36)}_${(callCounter++).toString(36)}`

const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }

function splitText(text: string): string[] {
  // A few deltas rather than one, so consumers see a real incremental stream.
  const pieces = text.match(/\S+\s*|\s+/g) ?? []
  if (pieces.length <= 3) return pieces.length > 0 ? pieces : [""]
  const size = Math.ceil(pieces.length / 3)
  const out: string[] = []
  for (let i = 0; i < pieces.length; i += size) out.push(pieces.slice(i, i + size).join(""))
  return out
}

export type StreamChunk = Record<string, unknown>

/** The ordered `chat.completion.chunk` objects for one reply (without the `[DONE]` sentinel). */
export function streamChunks(model: string, reply: ScriptReply): StreamChunk[] {
  const id = `chatcmpl-${Date.now().toString(36)}`
  const created = Math.floor(Date.now() / 1000)
  const chunk = (delta: Record<string, unknown>, finish: string | null, extra: Record<string, unknown> = {}) => ({
    id,
    object: "chat.completion.chunk",
    created,
    model,
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...extra,
  })

  const chunks: StreamChunk[] = [chunk({ role: "assistant", content: "" }, null)]
  if ("toolCalls" in reply) {
    reply.toolCalls.forEach((call, index) => {
      chunks.push(
        chunk(
          {
            tool_calls: [
              {
                index,
                id: nextCallId(),
                type: "function",
                function: { name: call.name, arguments: JSON.stringify(call.arguments) },
              },
            ],
          },
          null,
        ),
      )
    })
    chunks.push(chunk({}, "tool_calls", { usage }))
  } else {
    for (const piece of splitText(reply.text)) chunks.push(chunk({ content: piece }, null))
    chunks.push(chunk({}, "stop", { usage }))
  }
  return chunks
}

/** A complete non-streaming `chat.completion` body. */
export function completionBody(model: string, reply: ScriptReply): Record<string, unknown> {
  const message =
    "toolCalls" in reply
      ? {
          role: "assistant",
          content: null,
          tool_calls: reply.toolCalls.map((call) => ({
            id: nextCallId(),
            type: "function",
            function: { name: call.name, arguments: JSON.stringify(call.arguments) },
          })),
        }
      : { role: "assistant", content: reply.text }
  return {
    id: `chatcmpl-${Date.now().toString(36)}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message, finish_reason: "toolCalls" in reply ? "tool_calls" : "stop" }],
    usage,
  }
}
