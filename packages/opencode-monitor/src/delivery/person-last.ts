import type { Scheduler } from "../scheduler"
import { RECENT_MESSAGES } from "./history"
import type { SessionApi, SessionMessage } from "./session-api"
import type { Delivery } from "./session-queue"

// How long a person's message waits for a send on its way, then for its message to be stored.
const SEND_WAIT_MS = 2_000
const STORE_WAIT_MS = 1_000
const STORE_POLL_MS = 25

/** A message as opencode orders a session: by creation time, then id. */
export type MessageOrder = { id: string; created: number }

type Sent = { delivery: Delivery; accepted: Promise<boolean> }

const later = (a: MessageOrder, b: MessageOrder) => a.created > b.created || (a.created === b.created && a.id > b.id)

/**
 * opencode creates a person's message before `chat.message` and stores it after; a turn answers the
 * session's latest user message. A prompt of ours created in between (its send was on its way as the
 * person wrote) would be the latest, and what their turn answers. The person's `chat.message` waits
 * here for the session's last send and moves their message after it.
 */
export class PersonLast {
  private readonly last = new Map<string, Sent>()

  constructor(
    private readonly api: Pick<SessionApi, "recentMessages">,
    private readonly scheduler: Scheduler,
  ) {}

  /** A prompt is on its way: `accepted` settles true once opencode took it. */
  sending(delivery: Delivery, accepted: Promise<boolean>): void {
    this.last.set(delivery.sessionID, { delivery, accepted })
  }

  forget(sessionID: string): void {
    this.last.delete(sessionID)
  }

  /**
   * The creation time that makes a person's message (not yet stored) the session's latest: its own, or
   * just after the prompt of ours stored meanwhile; `moved` names that prompt.
   */
  async createdFor(sessionID: string, person: MessageOrder): Promise<{ created: number; moved?: Delivery }> {
    const sent = this.last.get(sessionID)
    if (!sent) return { created: person.created }
    const accepted = await this.within(SEND_WAIT_MS, sent.accepted)
    // Any later person's message is created after this one.
    if (this.last.get(sessionID) === sent) this.last.delete(sessionID)
    if (!accepted) return { created: person.created }
    const ours = (await this.stored(sent.delivery)).filter((m) => later(m, person))
    if (ours.length === 0) return { created: person.created }
    return { created: Math.max(...ours.map((m) => m.created)) + 1, moved: sent.delivery }
  }

  /** The delivery's messages, once stored (an empty list after STORE_WAIT_MS). */
  private async stored(delivery: Delivery): Promise<SessionMessage[]> {
    const until = this.scheduler.now() + STORE_WAIT_MS
    for (;;) {
      const messages = await this.api.recentMessages(delivery.sessionID, RECENT_MESSAGES)
      const ours = messages.filter((m) => m.role === "user" && m.notes.some((n) => n.key === delivery.key))
      if (ours.length > 0 || this.scheduler.now() >= until) return ours
      await new Promise((resolve) => this.scheduler.setTimeout(() => resolve(undefined), STORE_POLL_MS))
    }
  }

  private async within(ms: number, accepted: Promise<boolean>): Promise<boolean> {
    let timer: ReturnType<Scheduler["setTimeout"]> | undefined
    const timeout = new Promise<boolean>((resolve) => {
      timer = this.scheduler.setTimeout(() => resolve(false), ms)
    })
    try {
      return await Promise.race([accepted, timeout])
    } finally {
      if (timer) this.scheduler.clearTimeout(timer)
    }
  }
}
