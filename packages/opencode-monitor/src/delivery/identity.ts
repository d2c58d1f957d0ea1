import { type Identity, latestUserIdentity } from "./gates"
import { RECENT_MESSAGES, readBack } from "./history"
import type { SessionApi, SessionMessage } from "./session-api"

/** The agent and model each session's person last chose: from `chat.message`, history reads, or reading back. */
export class SessionIdentities {
  private readonly known = new Map<string, Identity>()

  constructor(private readonly api: Pick<SessionApi, "recentMessages">) {}

  /** A real (typed) user message the plugin saw; injected ones must not be passed here. */
  remember(sessionID: string, identity: Identity): void {
    if (identity.agent || identity.model) this.known.set(sessionID, identity)
  }

  /** A history read: its latest real user message is the newest identity there is. */
  noteHistory(sessionID: string, messages: readonly SessionMessage[]): void {
    const identity = latestUserIdentity(messages)
    if (identity) this.remember(sessionID, identity)
  }

  /** Throws when the history cannot be read: a prompt without an agent would switch the session's agent. */
  async resolve(sessionID: string, alreadyRead?: readonly SessionMessage[]): Promise<Identity> {
    const known = this.known.get(sessionID)
    if (known) return known
    // A read that held the whole history and no typed message: nothing further back to find.
    if (alreadyRead && alreadyRead.length < RECENT_MESSAGES) return { agent: undefined, model: undefined }
    const messages = await readBack(this.api, sessionID, (read) => latestUserIdentity(read) !== undefined)
    this.noteHistory(sessionID, messages)
    // A session nobody has typed in yet (one a tool created) has no identity to keep.
    return this.known.get(sessionID) ?? { agent: undefined, model: undefined }
  }

  forget(sessionID: string): void {
    this.known.delete(sessionID)
  }
}
