import type { SessionMessage } from "../delivery/session-api"
import { hashToken, TOKEN_VARIABLE } from "../process/process-group"
import { isLive, type ProcessIdentity, type ProcessTable, processTable, readProcess } from "../process/process-table"

// A state record is anyone's to write: a restarted server signals only a leader that proves it is the
// monitor's, and wakes only a session whose history shows its monitor_start (docs/security.md).

/** The facts about a process the proof needs, one small function each (injectable for tests). */
export type ProcessFacts = {
  /** The process's entry in the table (its group, session leadership, start, state); undefined when there is none. */
  stat(pid: number): ReturnType<typeof readProcess>
  /** TOKEN_VARIABLE from its environment (never its command line); undefined when absent or not readable whole. */
  token(pid: number): Promise<string | undefined>
  self(): Promise<{ pid: number; pgrp: number | undefined }>
}

export function tableFacts(table: ProcessTable = processTable): ProcessFacts {
  return {
    stat: (pid) => readProcess(pid, table),
    token: (pid) => table.environmentValue(pid, TOKEN_VARIABLE),
    self: async () => ({ pid: process.pid, pgrp: (await readProcess(process.pid, table))?.pgrp }),
  }
}

export type LeaderClaim = ProcessIdentity & { tokenHash?: string }

/** `unverified`: something runs under that pid but does not prove it is the monitor's: never signalled. */
export type LeaderProof = { kind: "proven" } | { kind: "gone" } | { kind: "unverified"; reason: string }

const unverified = (reason: string): LeaderProof => ({ kind: "unverified", reason })

export async function proveLeader(claim: LeaderClaim, facts: ProcessFacts = tableFacts()): Promise<LeaderProof> {
  const { pid } = claim
  // Checked before anything is read: kill(-1) and kill(-0) reach every process or our own group.
  if (!Number.isInteger(pid) || pid <= 1) return unverified(`pid ${pid} is never signalled`)
  const self = await facts.self()
  if (pid === self.pid) return unverified("it is this server")
  if (self.pgrp !== undefined && pid === self.pgrp) return unverified("it is this server's group")
  const stat = await facts.stat(pid)
  if (!isLive(stat)) return { kind: "gone" }
  if (claim.pidStartTime === undefined) return unverified("the record has no start time")
  if (stat.start !== claim.pidStartTime) return { kind: "gone" } // the pid was reused
  if (self.pgrp !== undefined && stat.pgrp === self.pgrp) return unverified("it is in this server's group")
  if (stat.pgrp !== pid || !stat.sessionLeader) return unverified("it does not lead its own session and process group")
  if (claim.tokenHash === undefined) return unverified("the record keeps no token hash")
  const token = await facts.token(pid)
  if (token === undefined) return unverified("it carries no monitor token")
  if (hashToken(token) !== claim.tokenHash) return unverified("it carries another monitor's token")
  return { kind: "proven" }
}

export function historyShowsStart(history: readonly SessionMessage[], monitorId: string): boolean {
  return history.some((message) => message.startedMonitors?.includes(monitorId) === true)
}
