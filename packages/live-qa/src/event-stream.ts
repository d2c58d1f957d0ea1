/**
 * Minimal SSE reader for opencode's `GET /event`. Raw fetch rather than the
 * SDK's subscribe(), because tests need a hard stop (abort) and must know when
 * the subscription is live (the `server.connected` event) before acting.
 */

export interface BusEvent {
  type: string
  properties: Record<string, unknown>
}

function parseEvent(data: string): BusEvent | undefined {
  try {
    const value: unknown = JSON.parse(data)
    if (typeof value !== "object" || value === null) return undefined
    // `GET /global/event` wraps each event as `{ directory, project, payload: { type, properties } }`.
    const outer = value as Record<string, unknown>
    const record = (typeof outer.payload === "object" && outer.payload !== null ? outer.payload : outer) as Record<
      string,
      unknown
    >
    if (typeof record.type !== "string") return undefined
    const properties =
      typeof record.properties === "object" && record.properties !== null
        ? (record.properties as Record<string, unknown>)
        : {}
    return { type: record.type, properties }
  } catch {
    return undefined
  }
}

/**
 * Reads events until the stream ends or `signal` aborts; never throws on abort. `path` is `/event`
 * (one project's bus) or `/global/event` (every project, plus plugin install failures).
 */
export async function readEvents(
  url: string,
  directory: string,
  signal: AbortSignal,
  onEvent: (event: BusEvent) => void,
  path: "/event" | "/global/event" = "/event",
): Promise<void> {
  // The global bus belongs to no project: asking it with a directory would start that project first.
  const scoped = path === "/event"
  const query = scoped ? `?directory=${encodeURIComponent(directory)}` : ""
  const headers: Record<string, string> = { accept: "text/event-stream" }
  if (scoped) headers["x-opencode-directory"] = encodeURIComponent(directory)
  const response = await fetch(`${url}${path}${query}`, { headers, signal })
  if (!response.ok || !response.body) throw new Error(`GET ${path} failed: HTTP ${response.status}`)
  const decoder = new TextDecoder()
  let buffer = ""
  try {
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk, { stream: true })
      // SSE frames end with a blank line; a frame may carry several `data:` lines.
      let end = buffer.indexOf("\n\n")
      while (end >= 0) {
        const frame = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const data = frame
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trimStart())
          .join("\n")
        const event = data ? parseEvent(data) : undefined
        if (event) onEvent(event)
        end = buffer.indexOf("\n\n")
      }
    }
  } catch (err) {
    if (!signal.aborted) throw err
  }
}
