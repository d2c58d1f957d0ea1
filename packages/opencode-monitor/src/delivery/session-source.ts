import { isTerminalBatch, type OutputBatch } from "../pipeline/batcher"
import { errorText } from "../errors"
import { namedLogger } from "../log"
import { type Scheduler, within } from "../scheduler"
import { carriesWake } from "./match-wake"
import type { SessionApi } from "./session-api"

/** Who owns a session: a person (primary), a subagent (a child session), or automation. */
export type SessionSource =
  | { kind: "primary" }
  | { kind: "subagent"; parentID: string; rootID: string }
  | { kind: "automation"; agent: string }

// A parent chain longer than this is treated as ending where the walk stopped.
const MAX_PARENT_DEPTH = 16

/** Automation first (its run is never the user's turn), then a parent makes a subagent; throws if a lookup fails. */
export async function classifySession(
  api: Pick<SessionApi, "parentOf">,
  sessionID: string,
  agent: string | undefined,
  automationAgents: readonly string[],
): Promise<SessionSource> {
  if (agent && automationAgents.includes(agent)) return { kind: "automation", agent }
  const parentID = await api.parentOf(sessionID)
  if (!parentID) return { kind: "primary" }
  let rootID = parentID
  for (let depth = 0; depth < MAX_PARENT_DEPTH; depth++) {
    const next = await api.parentOf(rootID)
    if (!next) break
    rootID = next
  }
  return { kind: "subagent", parentID, rootID }
}

// A terminal batch of a session not yet classified waits for this many lookups, this far apart.
const CLASSIFY_ATTEMPTS = 3
// How long monitor_start waits for its session's lookup (a busy host must not stall a tool call; sourceOf asks again).
const LEARN_WAIT_MS = 5_000

/** Sessions' sources; a lookup that keeps failing means primary: blind to an exit is worse than an extra wake. */
export class SessionSources {
  private readonly known = new Map<string, SessionSource>()
  private readonly agents = new Map<string, string | undefined>()

  constructor(
    private readonly api: Pick<SessionApi, "parentOf" | "log">,
    private readonly automationAgents: readonly string[],
    private readonly retry: { scheduler: Scheduler; delayMs: number },
  ) {}

  /** At monitor_start: remember the agent and classify now if not known yet. */
  async learn(sessionID: string, agent: string | undefined): Promise<void> {
    if (!this.agents.has(sessionID)) this.agents.set(sessionID, agent)
    if (this.known.has(sessionID)) return
    await within(
      this.retry.scheduler,
      LEARN_WAIT_MS,
      this.classify(sessionID).catch(() => undefined),
      undefined,
    )
  }

  cached(sessionID: string): SessionSource | undefined {
    return this.known.get(sessionID)
  }

  /** The cached source, or a fresh lookup retried a few times; primary when it keeps failing. */
  async sourceOf(sessionID: string): Promise<SessionSource> {
    for (let attempt = 1; ; attempt++) {
      const known = this.known.get(sessionID)
      if (known) return known
      try {
        return await this.classify(sessionID)
      } catch (error) {
        if (attempt >= CLASSIFY_ATTEMPTS) {
          const message = "session source unknown; treating it as primary for this batch"
          namedLogger(this.api, "session-source").warn(message, { sessionID, error: errorText(error) })
          return { kind: "primary" }
        }
        await new Promise<void>((resolve) => this.retry.scheduler.setTimeout(resolve, this.retry.delayMs))
      }
    }
  }

  forget(sessionID: string): void {
    this.known.delete(sessionID)
    this.agents.delete(sessionID)
  }

  private async classify(sessionID: string): Promise<SessionSource> {
    const source = await classifySession(this.api, sessionID, this.agents.get(sessionID), this.automationAgents)
    this.known.set(sessionID, source)
    return source
  }
}

/** Where one batch goes, and whether that delivery may wake its session. */
export type Route = { sessionID: string; wake: boolean; subagentSessionID?: string }

/**
 * Where a batch goes: a primary session gets its wakes, a subagent's go to its root with `subagent_wake: "parent"`,
 * automation is never woken. A person's stop from the TUI is news for the agent, not a reason to wake anyone.
 */
export function routeBatch(
  source: SessionSource,
  ownerSessionID: string,
  batch: OutputBatch,
  subagentWake: "off" | "parent",
): Route[] {
  const terminal = isTerminalBatch(batch)
  if (terminal && batch.status.kind === "stopped" && batch.status.byPerson)
    return [{ sessionID: ownerSessionID, wake: false }]
  const wake = terminal || carriesWake(batch)
  if (source.kind === "primary") return [{ sessionID: ownerSessionID, wake }]
  // A silence wake brings no new line: where nobody may be woken for it, nothing goes.
  if (batch.silence && !terminal) {
    return source.kind === "subagent" && subagentWake === "parent"
      ? [{ sessionID: source.rootID, wake: true, subagentSessionID: ownerSessionID }]
      : []
  }
  const own: Route = { sessionID: ownerSessionID, wake: false }
  if (source.kind === "subagent" && wake && subagentWake === "parent") {
    const root: Route = { sessionID: source.rootID, wake: true, subagentSessionID: ownerSessionID }
    return terminal ? [root] : [own, root]
  }
  return [own]
}
