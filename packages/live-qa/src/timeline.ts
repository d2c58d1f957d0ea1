/**
 * Records what happened on a live server, with timestamps, so a test can
 * assert on order and timing and print a readable story when it fails.
 */
import { type BusEvent, readEvents } from "./event-stream.ts"
import { serverActivity, waitFor } from "./wait.ts"

export type { BusEvent } from "./event-stream.ts"
export { sleep, waitFor, waitForIdle } from "./wait.ts"

export const DEFAULT_EVENT_TYPES = [
  "session.status",
  "session.idle",
  "session.created",
  "session.updated",
  "session.deleted",
  "session.error",
  "message.updated",
  "message.part.updated",
  "permission.asked",
  "permission.replied",
  "tui.toast.show",
] as const

export interface TimedEvent extends BusEvent {
  /** Date.now() when the event was read. */
  at: number
  sessionID: string | undefined
}

export interface TimelineRecorder {
  /** Live array of recorded events, oldest first. */
  events: TimedEvent[]
  /** Resolves with the first recorded event (past or future) that matches. */
  waitForEvent(match: (event: TimedEvent) => boolean, timeoutMs?: number, what?: string): Promise<TimedEvent>
  /** One line per event, times relative to the recorder start. */
  render(filter?: (event: TimedEvent) => boolean): string
  stop(): Promise<void>
}

export interface RecorderOptions {
  /** Event types to keep; `"all"` keeps everything (deltas included, which is noisy). */
  types?: readonly string[] | "all"
  /** Max wait for the subscription to be live. */
  connectTimeoutMs?: number
}

const eventSessionID = (event: BusEvent): string | undefined => {
  const direct = event.properties.sessionID
  if (typeof direct === "string") return direct
  // Older shapes nest the id in info/part; keep working if the server sends those.
  for (const key of ["info", "part"]) {
    const nested = event.properties[key]
    if (typeof nested === "object" && nested !== null) {
      const id = (nested as Record<string, unknown>).sessionID
      if (typeof id === "string") return id
    }
  }
  return undefined
}

/** Subscribes to `GET /event` and resolves once the server confirms the subscription. */
export async function startTimeline(
  server: { url: string; directory: string },
  options: RecorderOptions = {},
): Promise<TimelineRecorder> {
  const keep = options.types ?? DEFAULT_EVENT_TYPES
  const events: TimedEvent[] = []
  const started = Date.now()
  const controller = new AbortController()
  let connected = false

  const reading = readEvents(server.url, server.directory, controller.signal, (event) => {
    if (event.type === "server.connected") connected = true
    serverActivity()
    if (keep !== "all" && !keep.includes(event.type)) return
    events.push({ ...event, at: Date.now(), sessionID: eventSessionID(event) })
  }).catch((err: unknown) => {
    if (!controller.signal.aborted) console.error("[timeline] event stream failed:", err)
  })

  await waitFor(() => connected, options.connectTimeoutMs ?? 10_000, 20, "GET /event to connect")

  return {
    events,
    waitForEvent(match, timeoutMs = 10_000, what = "event") {
      return waitFor(() => events.find(match), timeoutMs, 20, what)
    },
    render(filter) {
      return events
        .filter((event) => (filter ? filter(event) : true))
        .map((event) => `+${((event.at - started) / 1000).toFixed(3)}s ${event.type} ${summarizeEvent(event)}`)
        .join("\n")
    },
    async stop() {
      controller.abort()
      await reading
    },
  }
}

function summarizeEvent(event: TimedEvent): string {
  const p = event.properties
  const short = (id: unknown) => (typeof id === "string" ? id.slice(-6) : "-")
  switch (event.type) {
    case "session.status":
      return `${short(event.sessionID)} ${JSON.stringify(p.status)}`
    case "message.updated": {
      const info = (p.info ?? {}) as Record<string, unknown>
      const time = (info.time ?? {}) as Record<string, unknown>
      return `${short(event.sessionID)} ${info.role} ${short(info.id)} finish=${info.finish ?? "-"} completed=${time.completed ? "yes" : "no"}`
    }
    case "message.part.updated": {
      const part = (p.part ?? {}) as Record<string, unknown>
      const state = (part.state ?? {}) as Record<string, unknown>
      const detail = part.type === "tool" ? `${part.tool} ${state.status}` : String(part.type)
      return `${short(event.sessionID)} ${short(part.messageID)} ${detail}`
    }
    default:
      return `${short(event.sessionID)} ${JSON.stringify(p).slice(0, 160)}`
  }
}

export {
  getMessages,
  lastAssistant,
  type MessageInfoView,
  type PartView,
  renderMessages,
  renderSessionTimeline,
  type SessionMessage,
  textOf,
} from "./session-messages.ts"
