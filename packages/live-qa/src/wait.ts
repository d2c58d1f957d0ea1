/**
 * Polling waits for live tests. Every wait is bounded and says what it waited
 * for, so a hung scenario fails with a message instead of a test timeout.
 */
import type { OpencodeClient } from "@opencode-ai/sdk"

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * Poll `predicate` until it returns something other than undefined/null/false;
 * resolves with that value.
 */
export async function waitFor<T>(
  predicate: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 10_000,
  pollMs = 50,
  what = "condition",
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await predicate()
    if (value !== undefined && value !== null && value !== false) return value
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(pollMs)
  }
}

export async function sessionStatus(client: OpencodeClient): Promise<Record<string, { type: string }>> {
  const result = await client.session.status()
  if (result.error || !result.data) throw new Error(`GET /session/status failed: ${JSON.stringify(result.error)}`)
  return result.data as Record<string, { type: string }>
}

export interface WaitForIdleOptions {
  /**
   * `promptAsync` answers 204 before the session is marked busy (up to ~1 s on
   * a first prompt), so an immediate status check would wrongly see "idle".
   * For up to this long we first wait for a sign the turn started or already
   * ended: the session shows busy, or the newest message is a completed
   * assistant message. 0 disables the grace (use when already busy).
   */
  busyGraceMs?: number
  /** Only count a completed assistant message created at/after this time (ms) as "turn ended". */
  since?: number
  pollMs?: number
}

async function newestIsCompletedAssistant(client: OpencodeClient, sessionID: string, since: number): Promise<boolean> {
  const result = await client.session.messages({ path: { id: sessionID }, query: { limit: 1 } })
  const newest = result.data?.[result.data.length - 1]?.info as
    | { role?: string; time?: { created?: number; completed?: number | null } }
    | undefined
  return (
    newest?.role === "assistant" && typeof newest.time?.completed === "number" && (newest.time.created ?? 0) >= since
  )
}

/** Idle means absent from GET /session/status (opencode drops idle sessions from that map). */
export async function waitForIdle(
  client: OpencodeClient,
  sessionID: string,
  timeoutMs = 30_000,
  options: WaitForIdleOptions = {},
): Promise<void> {
  // Each status read costs the server a few ms of CPU: 5 reads a second is soon enough for a test.
  const pollMs = options.pollMs ?? 200
  const grace = Math.min(options.busyGraceMs ?? 3000, timeoutMs)
  const started = Date.now()
  if (grace > 0) {
    await waitFor(
      async () =>
        sessionID in (await sessionStatus(client)) ||
        (await newestIsCompletedAssistant(client, sessionID, options.since ?? 0)),
      grace,
      pollMs,
    ).catch(() => undefined)
  }
  const left = Math.max(0, timeoutMs - (Date.now() - started))
  await waitFor(async () => !(sessionID in (await sessionStatus(client))), left, pollMs, `session ${sessionID} idle`)
}
