import type { SessionApi, SessionMessage } from "./session-api"

// The first read covers a normal session; each further page reads ten times as far back.
export const RECENT_MESSAGES = 60
const PAGE_GROWTH = 10
// Past this a session's history is not read further (the identity seen by chat.message remains).
const MAX_HISTORY_MESSAGES = 60_000

/** Reads history back until `enough` holds, all is read, or the bound; `?limit=N` is the newest N: pages overlap. */
export async function readBack(
  api: Pick<SessionApi, "recentMessages">,
  sessionID: string,
  enough: (messages: readonly SessionMessage[]) => boolean,
): Promise<SessionMessage[]> {
  let limit = RECENT_MESSAGES
  for (;;) {
    const messages = await api.recentMessages(sessionID, limit)
    if (enough(messages) || messages.length < limit || limit >= MAX_HISTORY_MESSAGES) return messages
    limit = Math.min(limit * PAGE_GROWTH, MAX_HISTORY_MESSAGES)
  }
}
