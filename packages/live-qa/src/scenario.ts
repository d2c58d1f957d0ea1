/**
 * Small helpers shared by the live scenarios: building a plan prompt, finding messages relative to
 * each other, bounded waits on envelopes and turns, the real process table, and a readable story
 * of what happened when an assertion fails.
 */
import type { Envelope, LiveProject } from "./monitor-qa.ts"
import { type PsEntry, psAll } from "./process-group.ts"
import { renderMessages, type SessionMessage, sleep, textOf, waitFor, waitForIdle } from "./timeline.ts"

/** A person's prompt for the scripted agent: a sentence, then STEP/SAY directives. */
export function planPrompt(
  intro: string,
  steps: Array<[tool: string, args: Record<string, unknown>]>,
  say: string,
): string {
  return [intro, ...steps.map(([tool, args]) => `STEP ${tool} ${JSON.stringify(args)}`), `SAY ${say}`].join("\n")
}

export const isRealUser = (m: SessionMessage) =>
  m.info.role === "user" && m.parts.some((p) => p.type === "text" && p.synthetic !== true)

export const isAssistant = (m: SessionMessage) => m.info.role === "assistant"

/** Messages after the one with `id` (all of them when it is missing). */
export function after(messages: SessionMessage[], id: string): SessionMessage[] {
  return messages.slice(messages.findIndex((m) => m.info.id === id) + 1)
}

/** The first assistant message that contains a tool part of this tool. */
export function stepWithTool(messages: SessionMessage[], tool: string): SessionMessage | undefined {
  return messages.find((m) => isAssistant(m) && m.parts.some((p) => p.type === "tool" && p.tool === tool))
}

/** How long a session wait goes without reading when the bus reports nothing (a missed event). */
const QUIET_READ_MS = 1_000

/**
 * Bounded wait until `read` (an HTTP read of the session) finds something. It reads again only once
 * the bus reported a change in the session, or after QUIET_READ_MS of none: every read costs the
 * server 5-15 ms of CPU, which a 100 ms poll spent for nothing while the whole suite shares 2 cores.
 */
export async function waitForSession<T>(
  qa: LiveProject,
  sessionID: string,
  read: () => Promise<T | undefined | null | false>,
  timeoutMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const seen = qa.timeline.events.length
    const value = await read()
    if (value !== undefined && value !== null && value !== false) return value
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sessionChanged(qa, sessionID, seen, Math.min(QUIET_READ_MS, deadline - Date.now()))
  }
}

/** Resolves when an event of the session is recorded after the first `seen`, or after `ms`. */
async function sessionChanged(qa: LiveProject, sessionID: string, seen: number, ms: number): Promise<void> {
  const until = Date.now() + ms
  for (let from = seen; Date.now() < until; from = qa.timeline.events.length) {
    const events = qa.timeline.events
    for (let i = from; i < events.length; i++) if (events[i]?.sessionID === sessionID) return
    await sleep(20)
  }
}

/** Bounded wait for an envelope in a session. */
export function waitForEnvelope(
  qa: LiveProject,
  sessionID: string,
  match: (envelope: Envelope) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<Envelope> {
  return waitForSession(qa, sessionID, async () => (await qa.envelopes(sessionID)).find(match), timeoutMs, what)
}

/** Bounded wait for a completed assistant message after the message `afterID` whose text matches. */
export function waitForReply(
  qa: LiveProject,
  sessionID: string,
  afterID: string,
  match: (text: string) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<SessionMessage> {
  return waitForSession(
    qa,
    sessionID,
    async () =>
      after(await qa.messages(sessionID), afterID).find(
        (m) => isAssistant(m) && typeof m.info.time.completed === "number" && match(textOf(m)),
      ),
    timeoutMs,
    what,
  )
}

/**
 * A wake as the person would see it: the envelope that wakes the session, the assistant turn that
 * answers it, and the session idle again.
 */
export async function waitForWake(
  qa: LiveProject,
  sessionID: string,
  match: (envelope: Envelope) => boolean,
  replyMatch: (text: string) => boolean,
  what: string,
  timeoutMs = 60_000,
): Promise<{ envelope: Envelope; reply: SessionMessage }> {
  const envelope = await waitForEnvelope(qa, sessionID, match, what, timeoutMs)
  const reply = await waitForReply(qa, sessionID, envelope.message.info.id, replyMatch, `the answer to ${what}`)
  await waitForIdle(qa.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  return { envelope, reply }
}

/** Live (non-zombie) processes whose arguments contain `marker`, or that sit in one of `groups`. */
/** The parent's messages after `parentWithChild`, when nothing else reached it. */
export const PARENT_OWN_TURN = [
  ["user", "USER_SAYS start"],
  ["assistant", "Answering the user: start"],
]

/**
 * A subagent set-up without the `task` tool: a parent session with one finished turn of its own,
 * then a child session of it (created with `parentID`) given `childPrompt`.
 */
export async function parentWithChild(
  qa: LiveProject,
  childPrompt: string,
): Promise<{ parentID: string; childID: string }> {
  const parentID = await qa.newSession({ title: "parent" })
  await qa.prompt(parentID, "USER_SAYS start")
  await waitForReply(qa, parentID, "", (t) => t === "Answering the user: start", "the parent's own turn")
  await waitForIdle(qa.server.client, parentID, 30_000, { busyGraceMs: 0 })
  const childID = await qa.newSession({ title: "child", parentID })
  const child = await qa.server.client.session.get({ path: { id: childID } })
  if (child.data?.parentID !== parentID) throw new Error(`session ${childID} was created without parent ${parentID}`)
  await qa.prompt(childID, childPrompt)
  return { parentID, childID }
}

export function liveProcesses(marker: string, groups: ReadonlySet<number> = new Set()): PsEntry[] {
  return psAll().filter(
    (e) =>
      !e.stat.startsWith("Z") && (e.command.includes(marker) || groups.has(e.pgid)) && !e.command.startsWith("ps "),
  )
}

/**
 * Waits until a process carrying `marker` runs; returns the process groups it runs in. A fresh
 * server's first turn can take well over 15 s on a loaded 2-core machine; `ps` is asked 5 times a second.
 */
export async function waitForProcess(marker: string, what: string, timeoutMs = 45_000): Promise<Set<number>> {
  const found = await waitFor(
    () => {
      const entries = liveProcesses(marker)
      return entries.length > 0 ? entries : undefined
    },
    timeoutMs,
    200,
    what,
  )
  return new Set(found.map((e) => e.pgid))
}

const DELIVERED =
  /"(sent monitor output|forced monitor output into a busy session|monitor output was already accepted)" .*source="?(monitor-output:[^\s"]+)/

/** Every delivery the plugin logged as done (sent, forced, or found already in the session), by key. */
export function deliveriesLogged(qa: LiveProject): Map<string, number> {
  const counts = new Map<string, number>()
  for (const line of qa.pluginLog()) {
    const key = line.match(DELIVERED)?.[2]
    if (key) counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  return counts
}

/**
 * Waits until the plugin has logged each monitor's exit notice as delivered, instead of waiting a
 * quiet while for a duplicate: once it is, nothing of that monitor is left to send (a settled
 * delivery leaves its queue, and a failed send would have logged "will retry").
 */
export function waitForExitNoticesDelivered(
  qa: LiveProject,
  monitorIds: readonly string[],
  timeoutMs = 30_000,
): Promise<true> {
  const settled = () => {
    const delivered = qa.pluginLog().filter((line) => DELIVERED.test(line) && line.includes("shouldReply=true"))
    return monitorIds.every((id) => delivered.some((line) => line.includes(`monitorId=${id} `)))
  }
  return waitFor(
    () => (settled() ? true : undefined),
    timeoutMs,
    100,
    `exit notices of ${monitorIds.join(", ")} delivered`,
  )
}

/** What a failing scenario prints: each session's messages and the plugin's log. */
export async function story(qa: LiveProject, sessions: Record<string, string>): Promise<string> {
  const out: string[] = []
  for (const [name, id] of Object.entries(sessions)) {
    const messages = await qa.messages(id).catch(() => [])
    out.push(`--- session ${name} (${id})`, renderMessages(messages))
  }
  out.push("--- plugin log", ...qa.pluginLog().map((line) => line.slice(0, 400)))
  return out.join("\n")
}

/** Runs the assertions; when one fails, prints the story first so the failure can be read. */
export async function explained<T>(
  qa: LiveProject,
  sessions: Record<string, string>,
  body: () => Promise<T>,
): Promise<T> {
  try {
    return await body()
  } catch (error) {
    console.error(await story(qa, sessions).catch((e) => `(no story: ${e})`))
    throw error
  }
}

/** Answers a pending permission request over HTTP, as a person at the TUI would. */
export function replyPermission(qa: LiveProject, id: unknown, reply: "once" | "always" | "reject"): Promise<Response> {
  const { url, directory } = qa.server
  return fetch(`${url}/permission/${id}/reply?directory=${encodeURIComponent(directory)}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-opencode-directory": encodeURIComponent(directory) },
    body: JSON.stringify({ reply }),
  })
}

/** The story of every run's session when `body` fails (`table` names each run's session). */
export function explainedAll(
  runs: readonly { table: string; live: LiveProject; sessionID: string }[],
  body: () => Promise<void>,
): Promise<void> {
  const [run, ...rest] = runs
  return run ? explained(run.live, { [run.table]: run.sessionID }, () => explainedAll(rest, body)) : body()
}

/**
 * Sends `signal` to the projects' server process alone (its group, so the monitors' own groups, gets
 * none from us), once their event streams are closed; `died` waits until it is gone. Returns when it went.
 */
export async function signalServer(
  lives: readonly LiveProject[],
  signal: NodeJS.Signals,
): Promise<{ at: number; died: () => Promise<unknown> }> {
  // The event streams would break with the server; close them first.
  for (const live of lives) await live.timeline.stop()
  const pid = lives[0]?.server.pid as number
  const at = Date.now()
  process.kill(pid, signal)
  const gone = () => !psAll().some((e) => e.pid === pid && !e.stat.startsWith("Z"))
  return { at, died: () => waitFor(gone, 5000, 25, "the server to die") }
}
