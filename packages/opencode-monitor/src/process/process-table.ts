import { readFileSync } from "node:fs"
import { attempt } from "../errors"
import { createProcTable } from "./proc-table"
import { createPsTable } from "./ps-table"

/** One process as the table shows it. Identity is `pid` + `start`: a pid whose start differs is another process. */
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

/** Processes read synchronously: these pids (the ones that exist), and the direct children of one. */
export type TableView = { read(pids: readonly number[]): ProcessEntry[]; childrenOf(pid: number): number[] }

/** The carriers of an entry, and the processes whose environment could not be read whole (any may carry it). */
export type EnvironmentSearch = { found: number[]; unreadable: number[] }

/** The one reader of the process table (/proc, else ps); a read that may run `ps` or `lsof` never blocks the loop. */
export interface ProcessTable {
  /** These processes, read now; the ones that do not exist are left out. */
  read(pids: readonly number[]): Promise<ProcessEntry[]>
  /** The same read and the direct children of a pid, synchronous, where they are cheap (/proc); undefined for ps. */
  readonly cheap: TableView | undefined
  /** Every process. Concurrent callers share one read. */
  scan(): Promise<ProcessEntry[]>
  /** Processes other than this one whose environment, never their command line, holds `entry` (`NAME=value`). */
  findByEnvironment(entry: string): Promise<EnvironmentSearch>
  /** `name`'s value in `pid`'s environment (never its command line); undefined when absent or not readable whole. */
  environmentValue(pid: number, name: string): Promise<string | undefined>
  /** The short command name of `pid` (/proc's `comm`, ps's `comm` without its directory); undefined when gone. */
  commandName(pid: number): Promise<string | undefined>
  /** What the descriptors 1 and 2 of `pid` are (pipe or socket identities), for `findHolders`. */
  outputTargets(pid: number): Promise<string[]>
  /** Processes other than this one holding any of `targets` open. */
  findHolders(targets: readonly string[]): Promise<number[]>
  /**
   * Watchdog shell functions: `alive` prints the `$known` `pid:start` words whose start still matches, `bytok`
   * the carriers of `<variable>=$tok` (the token in no program's arguments), `pgid` a pid's group (none: gone).
   */
  watchdogFunctions(variable: string): string[]
}

/** `read` shared by concurrent callers: while one runs, the others get its result. */
export function sharedWhileRunning<T>(read: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | undefined
  return () =>
    (running ??= read().finally(() => {
      running = undefined
    }))
}

/** `search` for one entry; searches asked while one runs are answered together by the next (one read, not one each). */
export function searchedTogether(
  search: (entries: string[]) => Promise<EnvironmentSearch[]>,
): (entry: string) => Promise<EnvironmentSearch> {
  let previous: Promise<unknown> = Promise.resolve()
  let gathering: { entries: string[]; answers: Promise<EnvironmentSearch[]> } | undefined
  return (entry) => {
    if (!gathering) {
      const entries: string[] = []
      // Once the search before has settled, and a turn later: the other stops of the same moment join this one.
      const answers = previous
        .then(() => new Promise((resolve) => setTimeout(resolve, 0)))
        .then(() => {
          gathering = undefined
          return search(entries)
        })
      // A failed search fails its own callers only: the next one still runs.
      previous = answers.catch(() => {})
      gathering = { entries, answers }
    }
    const index = gathering.entries.push(entry) - 1
    return gathering.answers.then((answers) => answers[index] as EnvironmentSearch)
  }
}

export const isLive = (entry: ProcessEntry | undefined): entry is ProcessEntry =>
  entry !== undefined && entry.state !== "Z" && entry.state !== "X"

/** A table of the given back end (default: /proc where it is readable, else ps). */
export function createProcessTable(
  kind: "proc" | "ps" = attempt(() => readFileSync("/proc/self/stat")) ? "proc" : "ps",
): ProcessTable {
  return kind === "proc" ? createProcTable() : createPsTable()
}

/** The table of this server, chosen once at load. */
export const processTable: ProcessTable = createProcessTable()

export async function readProcess(pid: number, table: ProcessTable = processTable): Promise<ProcessEntry | undefined> {
  return (await table.read([pid]))[0]
}

/** False once `pid` + `start` is gone, a zombie or a reused pid; without a start, any live pid may be it. */
export async function mayStillRun(
  pid: number,
  start: string | undefined,
  table: ProcessTable = processTable,
): Promise<boolean> {
  return runsAs(await readProcess(pid, table), start)
}

/** `entry` is a live process started at `start` (without a start, any live one): not gone, nor a reused pid. */
export const runsAs = (entry: ProcessEntry | undefined, start: string | undefined): entry is ProcessEntry =>
  isLive(entry) && (start === undefined || entry.start === start)

/** A process as a state record names it: its pid and the start time that proves it later. */
export type ProcessIdentity = { pid: number; pidStartTime: string | undefined }

/** This server process, read once as the plugin loads; its start time proves its identity later. */
export async function serverIdentity(table: ProcessTable = processTable): Promise<ProcessIdentity> {
  return { pid: process.pid, pidStartTime: (await readProcess(process.pid, table))?.start }
}
