import { readFileSync } from "node:fs"

/** What /proc/<pid>/stat says about a process: its state letter and start time (field 22). */
export type ProcStat = { state: string; startTime: string }

/** Reads /proc/<pid>/stat; undefined when the process does not exist (or this is not Linux). */
export function readProcStat(pid: number): ProcStat | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined
  let stat: string
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "latin1")
  } catch {
    return undefined
  }
  // The command name (field 2) may hold spaces and parentheses: fields restart after the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  const state = fields[0]
  const startTime = fields[19]
  if (!state || !startTime) return undefined
  return { state, startTime }
}

/** The start time that proves a pid's identity (field 22 of /proc/<pid>/stat), undefined when unknown. */
export function processStartTime(pid: number): string | undefined {
  return readProcStat(pid)?.startTime
}

/**
 * True only when `pid` runs (not a zombie) and is provably the process that started at
 * `startTime`. Without a recorded start time nothing can be proven, so the answer is false.
 */
export function isSameLiveProcess(pid: number, startTime: string | undefined): boolean {
  if (startTime === undefined) return false
  const stat = readProcStat(pid)
  return stat !== undefined && !isDead(stat.state) && stat.startTime === startTime
}

/**
 * Whether the process recorded as `pid` + `startTime` may still run: false once it is gone, a
 * zombie, or the pid belongs to another process. Without a start time (no /proc) a live pid
 * counts as possibly the same, so its records are left alone.
 */
export function mayStillRun(pid: number, startTime: string | undefined): boolean {
  const stat = readProcStat(pid)
  if (stat) return !isDead(stat.state) && (startTime === undefined || stat.startTime === startTime)
  if (process.platform === "linux") return false
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

function isDead(state: string): boolean {
  return state === "Z" || state === "X" || state === "x"
}
