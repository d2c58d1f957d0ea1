import { type EnvelopeNote, NOTE_KEY } from "../codec"
import { errorText } from "../errors"
import { formatMonitorBatch, formatWakeLine } from "./envelope"
import type { Identity } from "./gates"
import { readBack } from "./history"
import type { InjectorOptions } from "./injector"
import { DeliveryError, type SessionApi, type SessionMessage } from "./session-api"
import type { Delivery } from "./session-queue"

// Backoff after failures: pending_retry_ms, doubling, at most this.
const MAX_RETRY_DELAY_MS = 30_000
// A wake is abandoned only after failing this long (its session still existing), with a log line
// and a toast; an observation after this many failed attempts (its lines stay in monitor_output).
export const WAKE_GIVE_UP_MS = 30 * 60_000
const OBSERVATION_MAX_ATTEMPTS = 8

/** `found`: it is in the session. `absent`: it is not and may be sent. `unknown`: cannot tell yet. */
type Verdict = "found" | "absent" | "unknown"

/** The envelope a delivery sends (the same text on every attempt). */
export function envelopeText(delivery: Delivery): string {
  return formatMonitorBatch({
    batch: { ...delivery.batch, dropped: delivery.dropped },
    label: delivery.label,
    subagentSessionID: delivery.subagentSessionID,
    wake: delivery.matchWake,
  })
}

/** What the delivery's envelope says, as data (the text part's metadata). */
function envelopeNote(delivery: Delivery): EnvelopeNote {
  const { batch, matchWake } = delivery
  return {
    key: delivery.key,
    monitorId: batch.monitorId,
    batch: batch.batchSeq,
    label: delivery.label,
    status: batch.status,
    wake: delivery.wake,
    ...(matchWake ? { wakeReason: formatWakeLine(matchWake) } : {}),
  }
}

/**
 * How one delivery is sent, checked and retried: after an ambiguous failure the history is checked
 * before anything else, never a blind resend; back off, never faster than `pending_retry_ms`.
 */
export class DeliveryPolicy {
  constructor(
    private readonly options: Pick<InjectorOptions, "pending_retry_ms" | "accepted_message_skew_ms">,
    private readonly api: SessionApi,
    private readonly now: () => number,
  ) {}

  async send(delivery: Delivery, identity: Identity): Promise<{ outcome: "sent" | "failed" | "gone"; kind?: string }> {
    delivery.attempts++
    const text = envelopeText(delivery)
    try {
      await this.api.prompt(delivery.sessionID, {
        noReply: !delivery.wake,
        agent: identity.agent,
        model: identity.model,
        text,
        metadata: { [NOTE_KEY]: envelopeNote(delivery) },
      })
    } catch (error) {
      const kind = error instanceof DeliveryError ? error.kind : "ambiguous"
      delivery.lastError = errorText(error)
      if (kind === "gone") return { outcome: "gone", kind }
      if (kind === "ambiguous") delivery.unsureSince = this.now()
      return { outcome: "failed", kind }
    }
    return { outcome: "sent" }
  }

  /** After an ambiguous failure: is this envelope in the session? Never "absent" on a failed read. */
  async verify(delivery: Delivery): Promise<Verdict> {
    const since = delivery.firstQueuedAt - this.options.accepted_message_skew_ms
    const landed = (m: SessionMessage) =>
      m.role === "user" && m.created >= since && m.notes.some((note) => note.key === delivery.key)
    // Back far enough to see every message since the delivery was first queued.
    const enough = (read: readonly SessionMessage[]) => read.some(landed) || (read[0]?.created ?? 0) < since
    const messages = await readBack(this.api, delivery.sessionID, enough).catch((error) => {
      delivery.lastError = `history unavailable: ${errorText(error)}`
    })
    if (!messages) return "unknown"
    if (messages.some(landed)) return "found"
    // An accepted prompt_async is stored after its answer: give it time to appear.
    if (this.now() - (delivery.unsureSince ?? 0) < this.settleMs()) return "unknown"
    delivery.unsureSince = undefined
    return "absent"
  }

  /** When the next attempt may run, or that it is time to give up. */
  failed(delivery: Delivery): { retryInMs: number } | { giveUp: true } {
    const now = this.now()
    delivery.failures++
    delivery.firstFailureAt ??= now
    const spent = delivery.wake
      ? now - delivery.firstFailureAt >= WAKE_GIVE_UP_MS
      : delivery.attempts >= OBSERVATION_MAX_ATTEMPTS
    if (spent) return { giveUp: true }
    let delay = Math.min(MAX_RETRY_DELAY_MS, this.options.pending_retry_ms * 2 ** (delivery.failures - 1))
    delay = Math.max(delay, this.options.pending_retry_ms)
    // An unsure send is checked once it had time to show in the history.
    if (delivery.unsureSince !== undefined) delay = Math.max(delay, delivery.unsureSince + this.settleMs() - now)
    delivery.retryAt = now + delay
    return { retryInMs: delay }
  }

  private settleMs(): number {
    return Math.max(this.options.pending_retry_ms, this.options.accepted_message_skew_ms)
  }
}
