import { noteOf } from "../../src/codec"
import {
  DeliveryError,
  type PromptRequest,
  type SessionApi,
  type SessionMessage,
  type ToastVariant,
} from "../../src/delivery/session-api"
import type { LogLevel } from "../../src/log"

export type SentPrompt = PromptRequest & { sessionID: string; at: number }

/** An in-memory opencode for delivery logic: sessions, their status and history, what was sent. */
export class FakeSessionApi implements SessionApi {
  busy: Record<string, string> = {}
  history = new Map<string, SessionMessage[]>()
  parents = new Map<string, string>()
  sent: SentPrompt[] = []
  logs: { level: LogLevel; message: string; extra: Record<string, unknown>; service?: string }[] = []
  toasts: { variant: ToastVariant; title: string; message: string }[] = []
  /** Errors the next prompt calls throw, in order; "store" variants keep the message first. */
  failures: { kind: "gone" | "rejected" | "ambiguous"; stored?: boolean }[] = []
  statusFails = false
  /** History reads fail while this is true, or when it returns true for the read's number (1-based). */
  historyFails: boolean | ((read: number) => boolean) = false
  historyReads = 0
  /** The next this-many parent lookups fail. */
  parentFailures = 0
  /** While set, prompt calls wait for it after being recorded: a send in flight. */
  promptGate: Promise<void> | undefined
  /** Every prompt call, including the ones that failed. */
  promptCalls: { sessionID: string; at: number; key: string | undefined }[] = []
  /** Runs once a history read has been taken: what happens in opencode while that read is on its way back. */
  afterHistoryRead: ((sessionID: string) => void) | undefined

  constructor(private readonly now: () => number) {}

  /** opencode's `chat.message` for a prompt of ours: called with the note's key as the message is created. */
  onCreated: ((sessionID: string, key: string, created: number) => void) | undefined

  async busySessions() {
    if (this.statusFails) throw new Error("status unavailable")
    return { ...this.busy }
  }

  /** Like the real API: the newest `limit` messages (all without a limit), oldest first. */
  async recentMessages(sessionID: string, limit = 60) {
    const read = ++this.historyReads
    const fails = typeof this.historyFails === "function" ? this.historyFails(read) : this.historyFails
    if (fails) throw new Error("history unavailable")
    const all = this.history.get(sessionID) ?? []
    const recent = all.slice(Math.max(0, all.length - limit))
    this.afterHistoryRead?.(sessionID)
    return recent
  }

  async prompt(sessionID: string, request: PromptRequest) {
    this.promptCalls.push({ sessionID, at: this.now(), key: noteOf(request.metadata)?.key })
    if (this.promptGate) await this.promptGate
    const failure = this.failures.shift()
    if (failure && !failure.stored) throw new DeliveryError(failure.kind, `simulated ${failure.kind}`)
    this.sent.push({ ...request, sessionID, at: this.now() })
    const note = noteOf(request.metadata)
    if (note) this.onCreated?.(sessionID, note.key, this.now())
    this.addMessage(sessionID, {
      role: "user",
      synthetic: true,
      agent: request.agent,
      notes: note ? [note] : [],
    })
    if (failure) throw new DeliveryError(failure.kind, `simulated ${failure.kind} after storing`)
  }

  async parentOf(sessionID: string) {
    if (this.parentFailures > 0) {
      this.parentFailures--
      throw new Error("GET /session failed: 500")
    }
    return this.parents.get(sessionID)
  }

  /** Sessions deleted from this fake opencode. */
  gone = new Set<string>()

  async sessionExists(sessionID: string) {
    return !this.gone.has(sessionID)
  }

  log(level: LogLevel, message: string, extra: Record<string, unknown>, service?: string) {
    this.logs.push({ level, message, extra, ...(service ? { service } : {}) })
  }

  toast(variant: ToastVariant, title: string, message: string) {
    this.toasts.push({ variant, title, message })
  }

  /** `text` only says what the message was, for a reader: delivery reads notes, never the text. */
  addMessage(sessionID: string, message: Partial<SessionMessage> & Pick<SessionMessage, "role"> & { text?: string }) {
    const list = this.history.get(sessionID) ?? []
    list.push({
      created: this.now(),
      completed: message.role === "assistant" ? this.now() : undefined,
      finish: message.role === "assistant" ? "stop" : undefined,
      toolRunning: false,
      synthetic: false,
      agent: undefined,
      model: undefined,
      notes: [],
      ...message,
    })
    this.history.set(sessionID, list)
  }

  sources(): string[] {
    return this.sent.map((p) => noteOf(p.metadata)?.key ?? "")
  }
}

/** Lets pending promise callbacks (the injector's awaits on the fake API) run. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve()
}
