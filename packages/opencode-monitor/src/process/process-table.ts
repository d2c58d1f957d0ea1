import { readFileSync } from "node:fs"
import { createProcTable } from "./proc-table"
import { createPsTable, type PsTableOptions } from "./ps-table"

/**
 * One process as the table shows it: what tracking, stops, recovery and the TUI need. Identity is
 * `pid` + `start`: a pid whose start differs is another process, never signalled.
 */
export type ProcessEntry = {
  pid: number
  ppid: number
  pgrp: number
  /** The session id where the back end knows it (/proc); `ps` on macOS has no portable one. */
  sid: number | undefined
  /** Leads its own session (setsid): /proc's session id is its pid, `ps`'s STAT has an `s`. */
  sessionLeader: boolean
  /** The state letter: `Z` (or `X`) is a process that no longer runs. */
  state: string
  /** /proc: clock ticks since boot (field 22). ps: `lstart` without spaces (UTC, C locale), 1 s resolution. */
  start: string
}

/**
 * The one reader of the process table. Two back ends: `/proc` (Linux) and `ps` (the options Linux
 * procps and macOS ps both accept), chosen at load by whether /proc is readable; tests force one.
 */
export interface ProcessTable {
  readonly kind: "proc" | "ps"
  /** These processes, read now; the ones that do not exist are left out. */
  read(pids: readonly number[]): ProcessEntry[]
  /** True when `childrenOf` asks the kernel cheaply (/proc); false: only a scan knows the children (ps). */
  readonly listsChildren: boolean
  /** Direct children of `pid` (empty where `listsChildren` is false). */
  childrenOf(pid: number): number[]
  /** Every process. Asynchronous; concurrent callers share one read. */
  scan(): Promise<ProcessEntry[]>
  /** Processes other than this one whose environment holds `entry` (`NAME=value`, exactly). */
  findByEnvironment(entry: string): Promise<number[]>
  /**
   * The value of variable `name` in `pid`'s environment as it started; undefined when it has none
   * or the environment cannot be read (gone, another user's).
   */
  environmentValue(pid: number, name: string): string | undefined
  /** The short command name of `pid` (/proc's `comm`, ps's `comm` without its directory); undefined when gone. */
  commandName(pid: number): string | undefined
  /** What the descriptors 1 and 2 of `pid` are (pipe or socket identities), for `findHolders`. */
  outputTargets(pid: number): string[]
  /** Processes other than this one holding any of `targets` open. */
  findHolders(targets: readonly string[]): Promise<number[]>
  /**
   * Shell functions for the watchdog script: `alive` prints those of `$known` (`pid:start` words)
   * whose start still matches, `bytok` the pids carrying `<variable>=$tok` in their environment,
   * `pgid` the process group of the pid it is given (nothing when it is gone).
   */
  watchdogFunctions(variable: string): string[]
}

export const isLive = (entry: ProcessEntry | undefined): entry is ProcessEntry =>
  entry !== undefined && entry.state !== "Z" && entry.state !== "X"

/** Whether /proc can be read here: the choice of back end. */
function procReadable(): boolean {
  try {
    readFileSync("/proc/self/stat", "latin1")
    return true
  } catch {
    return false
  }
}

/** A table of the given back end (default: /proc where it is readable, else ps); `ps` options for tests. */
export function createProcessTable(
  kind: "proc" | "ps" = procReadable() ? "proc" : "ps",
  options: PsTableOptions = {},
): ProcessTable {
  return kind === "proc" ? createProcTable() : createPsTable(options)
}

/** The table of this server, chosen once at load. */
export const processTable: ProcessTable = createProcessTable()

export function readProcess(pid: number, table: ProcessTable = processTable): ProcessEntry | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined
  return table.read([pid])[0]
}

/** The start time that proves `pid`'s identity later; undefined when it does not run. */
export function processStartTime(pid: number, table: ProcessTable = processTable): string | undefined {
  return readProcess(pid, table)?.start
}

/**
 * True only when `pid` runs (not a zombie) and is provably the process that started at `start`.
 * Without a recorded start time nothing can be proven, so the answer is false.
 */
export function isSameLiveProcess(pid: number, start: string | undefined, table: ProcessTable = processTable): boolean {
  if (start === undefined) return false
  const entry = readProcess(pid, table)
  return isLive(entry) && entry.start === start
}

/**
 * Whether the process recorded as `pid` + `start` may still run: false once it is gone, a zombie,
 * or the pid belongs to another process. Without a recorded start a live pid counts as possibly it.
 */
export function mayStillRun(pid: number, start: string | undefined, table: ProcessTable = processTable): boolean {
  const entry = readProcess(pid, table)
  return isLive(entry) && (start === undefined || entry.start === start)
}

/** Whether `pid` leads its own session and its own process group (as a monitor's leader does). */
export function leadsSessionAndGroup(pid: number, table: ProcessTable = processTable): boolean {
  const entry = readProcess(pid, table)
  return isLive(entry) && entry.sessionLeader && entry.pgrp === pid
}

/** Whether `pid` carries `value` in variable `name` of its environment (a monitor's token, say). */
export function carriesEnvironment(
  pid: number,
  name: string,
  value: string,
  table: ProcessTable = processTable,
): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false
  return table.environmentValue(pid, name) === value
}
