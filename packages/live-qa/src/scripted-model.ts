/**
 * A tiny OpenAI-compatible chat-completions server whose answers come from a
 * test-provided script. opencode talks to it through its bundled
 * `@ai-sdk/openai-compatible` provider, so live tests drive the real agent loop
 * deterministically and offline.
 */
import type { Server } from "bun"
import {
  type ChatMessage,
  type ChatRequest,
  type ChatTool,
  completionBody,
  type ScriptReply,
  streamChunks,
} from "./openai-wire.ts"

export type { ChatMessage, ChatRequest, ChatTool, ScriptReply, ToolCallSpec } from "./openai-wire.ts"
export { lastMessage, lastUserText, messageText, toolResults } from "./openai-wire.ts"

/** The test's brain: sees each parsed request, decides the answer. */
export type Script = (request: ChatRequest, index: number) => ScriptReply | Promise<ScriptReply>

export interface RecordedRequest {
  /** Date.now() when the request arrived. */
  at: number
  request: ChatRequest
  /** True when the request carried no tools and got the default answer. */
  toolless: boolean
  reply?: ScriptReply
  error?: string
}

export interface ScriptedModelOptions {
  /**
   * Requests without `tools` are opencode's title/summary calls on the small
   * model; by default they get `toollessText` and never reach the script, so
   * scripts only ever see real agent steps. Set true to send them to the script.
   */
  scriptToolless?: boolean
  toollessText?: string
}

export interface ScriptedModel {
  /** Base URL to put in the provider config, ends in `/v1`. */
  baseURL: string
  port: number
  /** Every request received, in arrival order (live array). */
  requests: RecordedRequest[]
  /** Only the requests that went to the script (agent steps). */
  scripted(): RecordedRequest[]
  stop(): Promise<void>
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Resolves early on abort, so a cancelled opencode step does not keep a stream parked. */
function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || signal.aborted) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal.removeEventListener("abort", done)
      resolve()
    }
    signal.addEventListener("abort", done)
  })
}

function parseRequest(raw: unknown): ChatRequest | string {
  if (typeof raw !== "object" || raw === null) return "body is not a JSON object"
  const body = raw as Record<string, unknown>
  if (!Array.isArray(body.messages)) return "messages missing"
  const tools = Array.isArray(body.tools) ? (body.tools as ChatTool[]) : undefined
  return {
    model: typeof body.model === "string" ? body.model : "",
    messages: body.messages as ChatMessage[],
    tools: tools && tools.length > 0 ? tools : undefined,
    stream: body.stream === true,
    raw: body,
  }
}

function jsonError(status: number, message: string): Response {
  // 400 on purpose: the AI SDK retries 5xx, which would turn a broken script into a slow loop.
  return Response.json({ error: { message, type: "invalid_request_error" } }, { status })
}

export function startScriptedModel(script: Script, options: ScriptedModelOptions = {}): ScriptedModel {
  const requests: RecordedRequest[] = []
  let scriptIndex = 0

  async function handle(req: Request): Promise<Response> {
    const url = new URL(req.url)
    if (req.method === "GET" && url.pathname === "/v1/models") {
      return Response.json({ object: "list", data: [{ id: "m", object: "model" }] })
    }
    if (req.method !== "POST" || url.pathname !== "/v1/chat/completions") {
      return jsonError(404, `no route ${req.method} ${url.pathname}`)
    }
    let raw: unknown
    try {
      raw = await req.json()
    } catch {
      return jsonError(400, "invalid JSON body")
    }
    const parsed = parseRequest(raw)
    if (typeof parsed === "string") return jsonError(400, parsed)

    const toolless = parsed.tools === undefined && options.scriptToolless !== true
    const record: RecordedRequest = { at: Date.now(), request: parsed, toolless }
    requests.push(record)

    let reply: ScriptReply
    try {
      reply = toolless ? { text: options.toollessText ?? "Scripted title" } : await script(parsed, scriptIndex++)
    } catch (err) {
      record.error = err instanceof Error ? err.message : String(err)
      return jsonError(400, `script failed: ${record.error}`)
    }
    record.reply = reply

    if (!parsed.stream) {
      await sleepUnlessAborted(reply.delayMs ?? 0, req.signal)
      return Response.json(completionBody(parsed.model, reply))
    }
    return streamResponse(parsed.model, reply, req.signal)
  }

  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    // Slow scripts (delayMs) must not be cut by Bun's default 10 s idle timeout.
    idleTimeout: 0,
    fetch: handle,
  })
  const port = server.port ?? 0

  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    port,
    requests,
    scripted: () => requests.filter((r) => !r.toolless),
    async stop() {
      await server.stop(true)
    },
  }
}

function streamResponse(model: string, reply: ScriptReply, signal: AbortSignal): Response {
  const encoder = new TextEncoder()
  const chunks = streamChunks(model, reply)
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      try {
        // The role chunk goes out first so headers + first byte arrive even when the script is slow.
        const [first, ...rest] = chunks
        if (first) controller.enqueue(encoder.encode(`data: ${JSON.stringify(first)}\n\n`))
        await sleepUnlessAborted(reply.delayMs ?? 0, signal)
        for (const chunk of rest) {
          if (signal.aborted) break
          controller.enqueue(encoder.encode(`data: ${JSON.stringify(chunk)}\n\n`))
          // A tiny gap makes text arrive as real deltas rather than one TCP write.
          await sleep(1)
        }
        if (!signal.aborted) controller.enqueue(encoder.encode("data: [DONE]\n\n"))
        controller.close()
      } catch {
        // The client went away mid-stream; nothing left to deliver.
      }
    },
  })
  return new Response(stream, {
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" },
  })
}
