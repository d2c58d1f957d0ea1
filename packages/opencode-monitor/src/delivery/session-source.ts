import { isTerminalBatch, type OutputBatch } from "../pipeline/batcher"
import { carriesWake } from "./match-wake"
import type { SessionApi } from "./session-api"

/**
 * Who owns a session (seed 000): a person's primary session, a subagent's child session, or
 * automation. A completion means nothing until it is attributed, so this is decided before any
 * delivery decision.
 */
export type SessionSource =
  | { kind: "primary" }
  | { kind: "subagent"; parentID: string; rootID: string }
  | { kind: "automation"; agent: string }

// A parent chain longer than this is treated as ending where the walk stopped.
const MAX_PARENT_DEPTH = 16

/**
 * The one classification function. Automation wins over everything (an orchestrator's internal
 * run is never the user's turn); then a parentID makes a subagent. When the lookup fails the
 * session counts as primary: a monitor blind to its exit is worse than an extra wake.
 */
export async function classifySession(
  api: Pick<SessionApi, "parentOf">,
  sessionID: string,
  agent: string | undefined,
  automationAgents: readonly string[],
): Promise<SessionSource> {
  if (agent && automationAgents.includes(agent)) return { kind: "automation", agent }
  let parentID: string | undefined
  try {
    parentID = await api.parentOf(sessionID)
  } catch {
    return { kind: "primary" }
  }
  if (!parentID) return { kind: "primary" }
  let rootID = parentID
  for (let depth = 0; depth < MAX_PARENT_DEPTH; depth++) {
    let next: string | undefined
    try {
      next = await api.parentOf(rootID)
    } catch {
      break
    }
    if (!next) break
    rootID = next
  }
  return { kind: "subagent", parentID, rootID }
}

/** Where one batch goes, and whether that delivery may wake its session. */
export type Route = { sessionID: string; wake: boolean; subagentSessionID?: string }

/**
 * Primary: observations and the wakes (the terminal batch, a batch with a `wake_pattern` match),
 * in its own session. Subagent: observations only in the child; with `subagent_wake: "parent"`
 * its wakes also go to the root primary session, naming the child. Automation: observations
 * only, never woken. A match wake may still turn into an observation (MatchWakePolicy).
 */
export function routeBatch(
  source: SessionSource,
  ownerSessionID: string,
  batch: OutputBatch,
  subagentWake: "off" | "parent",
): Route[] {
  const wake = isTerminalBatch(batch) || carriesWake(batch)
  if (source.kind === "primary") return [{ sessionID: ownerSessionID, wake }]
  const own: Route = { sessionID: ownerSessionID, wake: false }
  if (source.kind === "subagent" && wake && subagentWake === "parent") {
    return [own, { sessionID: source.rootID, wake: true, subagentSessionID: ownerSessionID }]
  }
  return [own]
}
