import { type Scheduler, within } from "../scheduler"
import type { Delivery } from "./session-queue"

// How long a person's message waits to learn when a prompt of ours on its way was created.
const WAIT_MS = 2_000

type Sent = { delivery: Delivery } & ReturnType<typeof Promise.withResolvers<number | undefined>>

/**
 * opencode creates a person's message, calls `chat.message`, then stores it; a turn answers the
 * session's latest user message by creation time. A prompt of ours created in between (its send was on
 * its way as the person wrote) would be the latest, and what their turn answers. The person's
 * `chat.message` waits here to learn when the session's last prompt of ours was created, and moves the
 * person's message after it.
 */
export class PersonLast {
  private readonly last = new Map<string, Sent>()
  /** When a person last wrote in each session, as chat.message saw it. */
  private readonly wroteAt = new Map<string, number>()

  constructor(private readonly scheduler: Scheduler) {}

  /** A prompt of ours is about to be sent; call the result with whether opencode took it. */
  sending(delivery: Delivery): (accepted: boolean) => void {
    const sent: Sent = { delivery, ...Promise.withResolvers<number | undefined>() }
    this.last.set(delivery.sessionID, sent)
    return (accepted) => accepted || sent.resolve(undefined)
  }

  /** `chat.message` of a prompt of ours: when opencode created it. */
  seen(sessionID: string, key: string, created: number): void {
    const sent = this.last.get(sessionID)
    if (sent?.delivery.key === key) sent.resolve(created)
  }

  forget(sessionID: string): void {
    this.last.delete(sessionID)
    this.wroteAt.delete(sessionID)
  }

  /** A person wrote within `windowMs`: a message the history read may still miss. */
  justWrote(sessionID: string, windowMs: number): boolean {
    const at = this.wroteAt.get(sessionID)
    return at !== undefined && this.scheduler.now() - at < windowMs
  }

  /**
   * A person wrote: the creation time that keeps their message after ours, its own or just after the
   * prompt `moved`.
   */
  async createdFor(sessionID: string, created: number): Promise<{ created: number; moved?: Delivery }> {
    this.wroteAt.set(sessionID, this.scheduler.now())
    const sent = this.last.get(sessionID)
    if (!sent) return { created }
    const ours = await within(this.scheduler, WAIT_MS, sent.promise, undefined)
    // Any later person's message is created after this one.
    if (this.last.get(sessionID) === sent) this.last.delete(sessionID)
    if (ours === undefined || ours < created) return { created }
    return { created: ours + 1, moved: sent.delivery }
  }
}
