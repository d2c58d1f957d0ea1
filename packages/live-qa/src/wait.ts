/**
 * Polling waits for live tests. Every wait is bounded and says what it waited
 * for, so a hung scenario fails with a message instead of a test timeout.
 */
import type { OpencodeClient } from "@opencode-ai/sdk"

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// A look that asks a server (a predicate that returns a promise) costs opencode several ms of CPU:
// polled every 50 ms through a whole suite, such looks cost more than the scenarios themselves.
// Between looks, an asynchronous predicate waits for a sign that something changed (a bus event,
// a server log line), and looks again at the latest after QUIET_LOOK_MS without one.
const QUIET_LOOK_MS = 500
let waiters: (() => void)[] = []

/** Something happened on a server under test (a bus event, a log line): waiting looks go again now. */
export function serverActivity(): void {
  const wake = waiters
  waiters = []
  for (const resume of wake) resume()
}

function activityOr(ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    waiters.push(() => {
      clearTimeout(timer)
      resolve()
    })
  })
}

/**
 * Looks at `predicate` until it returns something other than undefined/null/false; resolves with
 * that value. Looks are at least `pollMs` apart; an asynchronous predicate is looked at again on
 * server activity, or after QUIET_LOOK_MS without any.
 */
export async function waitFor<T>(
  predicate: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 10_000,
  pollMs = 50,
  what = "condition",
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const looked = Date.now()
    const result = predicate()
    const asks = result instanceof Promise
    const value = await result
    if (value !== undefined && value !== null && value !== false) return value
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    if (!asks) {
      await sleep(pollMs)
      continue
    }
    const quiet = Math.min(Math.max(QUIET_LOOK_MS, pollMs), deadline - Date.now())
    await activityOr(quiet)
    const early = looked + pollMs - Date.now()
    if (early > 0) await sleep(early)
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
