import type { SessionMessage } from "../delivery/session-api"
import { hashToken, TOKEN_VARIABLE } from "../process/process-group"
import { type ProcessTable, processTable, readProcess } from "../process/process-table"

/**
 * What a state record may make a restarted server do. A record is a claim
 * anyone running as the user can write, so a process is signalled only when it proves itself:
 * it is no process ≤ 1, not this server or its group, the pid still has the recorded start time,
 * it still leads its own session and group (as every monitor's `sh` does), and it carries the
 * monitor's token, whose hash the record keeps. A session is woken only when its history shows
 * the `monitor_start` call that made the monitor.
 */

/** The facts about a process the proof needs, one small function each (injectable for tests). */
export type ProcessFacts = {
  /** Group, session, start time and state letter of a running process; undefined when there is none. */
  stat(pid: number): { state: string; pgrp: number; sid: number; start: string } | undefined
  /** The value of TOKEN_VARIABLE in the process's environment, undefined when it has none or it cannot be read. */
  token(pid: number): string | undefined
  /** This server: its pid and process group. */
  self(): { pid: number; pgrp: number | undefined }
}

/** The facts as the process table (/proc or ps, process/process-table.ts) tells them. */
export function tableFacts(table: ProcessTable = processTable): ProcessFacts {
  return {
    stat(pid) {
      const entry = readProcess(pid, table)
      if (!entry) return undefined
      // ps shows no session id, only whether a process leads its session: `sid` is then the pid or 0.
      const sid = entry.sid ?? (entry.sessionLeader ? entry.pid : 0)
      return { state: entry.state, pgrp: entry.pgrp, sid, start: entry.start }
    },
    token: (pid) => table.environmentValue(pid, TOKEN_VARIABLE),
    self: () => ({ pid: process.pid, pgrp: readProcess(process.pid, table)?.pgrp }),
  }
}

export type LeaderClaim = { pid: number; pidStartTime: string | undefined; tokenHash?: string }

/**
 * `proven`: the recorded leader runs and is this monitor's, its group may be signalled.
 * `gone`: no process of that identity runs (nothing to do). `unverified`: something runs under
 * that pid that does not prove it is the monitor's: never signalled, reported as a claim.
 */
export type LeaderProof = { kind: "proven" } | { kind: "gone" } | { kind: "unverified"; reason: string }

export function proveLeader(claim: LeaderClaim, facts: ProcessFacts = tableFacts()): LeaderProof {
  const { pid } = claim
  // Checked before anything is read: kill(-1) and kill(-0) reach every process or our own group.
  if (!Number.isInteger(pid) || pid <= 1) return { kind: "unverified", reason: `pid ${pid} is never signalled` }
  const self = facts.self()
  if (pid === self.pid) return { kind: "unverified", reason: "it is this server" }
  if (self.pgrp !== undefined && pid === self.pgrp) return { kind: "unverified", reason: "it is this server's group" }
  const stat = facts.stat(pid)
  if (!stat || stat.state === "Z" || stat.state === "X") return { kind: "gone" }
  if (claim.pidStartTime === undefined) return { kind: "unverified", reason: "the record has no start time" }
  if (stat.start !== claim.pidStartTime) return { kind: "gone" } // the pid was reused
  if (self.pgrp !== undefined && stat.pgrp === self.pgrp) {
    return { kind: "unverified", reason: "it is in this server's group" }
  }
  if (stat.pgrp !== pid || stat.sid !== pid) {
    return { kind: "unverified", reason: "it does not lead its own session and process group" }
  }
  if (claim.tokenHash === undefined) return { kind: "unverified", reason: "the record keeps no token hash" }
  const token = facts.token(pid)
  if (token === undefined) return { kind: "unverified", reason: "it carries no monitor token" }
  if (hashToken(token) !== claim.tokenHash) return { kind: "unverified", reason: "it carries another monitor's token" }
  return { kind: "proven" }
}

/** The session's history shows the `monitor_start` call that returned this monitor id. */
export function historyShowsStart(history: readonly SessionMessage[], monitorId: string): boolean {
  return history.some((message) => message.startedMonitors?.includes(monitorId) === true)
}
