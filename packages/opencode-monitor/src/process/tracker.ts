import { readdirSync, readFileSync, readlinkSync } from "node:fs"
import { readdir, readFile, readlink } from "node:fs/promises"

/** The fields of /proc/<pid>/stat that tracking needs; `start` (clock ticks since boot) tells a reused pid. */
export type ProcStat = { pid: number; state: string; ppid: number; pgrp: number; sid: number; start: string }

export const canTrack = process.platform === "linux"

function parseStat(pid: number, stat: string): ProcStat {
  // Fields after the parenthesised command name: state ppid pgrp session ... starttime (22nd overall).
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return {
    pid,
    state: fields[0] ?? "?",
    ppid: Number(fields[1]),
    pgrp: Number(fields[2]),
    sid: Number(fields[3]),
    start: fields[19] ?? "",
  }
}

export function readStat(pid: number): ProcStat | undefined {
  try {
    return parseStat(pid, readFileSync(`/proc/${pid}/stat`, "latin1"))
  } catch {
    return undefined
  }
}

export const isLive = (stat: ProcStat | undefined): stat is ProcStat =>
  stat !== undefined && stat.state !== "Z" && stat.state !== "X"

/** Direct children of a process (every thread's), from /proc/<pid>/task/<tid>/children. */
function childrenOf(pid: number): number[] {
  const children: number[] = []
  let tasks: string[]
  try {
    tasks = readdirSync(`/proc/${pid}/task`)
  } catch {
    return children
  }
  for (const tid of tasks) {
    try {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, "latin1").trim()
      if (text) for (const child of text.split(" ")) children.push(Number(child))
    } catch {
      // The thread or process ended meanwhile.
    }
  }
  return children
}

/** The pid directories of /proc (none if it cannot be read). */
async function processIds(): Promise<string[]> {
  const entries = await readdir("/proc").catch(() => [] as string[])
  return entries.filter((entry) => entry.charCodeAt(0) >= 48 && entry.charCodeAt(0) <= 57)
}

let inflightScan: Promise<ProcStat[]> | undefined

/**
 * Every process in the table. Asynchronous and yielding, so a host with thousands of processes
 * does not stall the event loop; concurrent callers share one scan.
 */
export function scanProcessTable(): Promise<ProcStat[]> {
  inflightScan ??= (async () => {
    try {
      const pids = await processIds()
      const stats: ProcStat[] = []
      for (let i = 0; i < pids.length; i += 64) {
        const slice = pids.slice(i, i + 64)
        const texts = await Promise.all(
          slice.map((pid) => readFile(`/proc/${pid}/stat`, "latin1").catch(() => undefined)),
        )
        texts.forEach((text, k) => {
          if (text !== undefined) stats.push(parseStat(Number(slice[k]), text))
        })
      }
      return stats
    } finally {
      inflightScan = undefined
    }
  })()
  return inflightScan
}

/** What a process's descriptor points at (`pipe:[123]`, `socket:[456]`), or undefined. */
export function descriptorTarget(pid: number, fd: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/fd/${fd}`)
  } catch {
    return undefined
  }
}

/**
 * Processes other than this one holding any of `targets` (descriptor targets as
 * `descriptorTarget` reads them). Reads every process's descriptors, yielding: for the rare case
 * of output pipes held open after the command ended.
 */
export async function findHolders(targets: string[]): Promise<number[]> {
  const wanted = new Set(targets)
  const holders: number[] = []
  const pids = await processIds()
  for (const pid of pids) {
    if (Number(pid) === process.pid) continue
    const fds = await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])
    for (const fd of fds) {
      const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => undefined)
      if (target !== undefined && wanted.has(target)) {
        holders.push(Number(pid))
        break
      }
    }
  }
  return holders
}

type EnvironmentQuery = { entry: Buffer; found: number[]; resolve: (pids: number[]) => void }
let queued: EnvironmentQuery[] = []
let scanning = false

/**
 * Processes other than this one whose environment holds `entry` (`NAME=value`, exactly). Reads
 * the environment of every process this user may read, yielding; other users' are skipped.
 * Queries made while a scan runs are answered together by the next one, so concurrent stops
 * read the table once.
 */
export function findByEnvironment(entry: string): Promise<number[]> {
  return new Promise((resolve) => {
    queued.push({ entry: Buffer.from(entry), found: [], resolve })
    if (!scanning) {
      scanning = true
      void runEnvironmentScans()
    }
  })
}

async function runEnvironmentScans(): Promise<void> {
  // Let the other stops of the same moment queue their query first.
  await new Promise((resolve) => setTimeout(resolve, 0))
  while (queued.length > 0) {
    const queries = queued
    queued = []
    const pids = await processIds()
    for (let i = 0; i < pids.length; i += 32) {
      const slice = pids.slice(i, i + 32)
      const environments = await Promise.all(
        slice.map((pid) => readFile(`/proc/${pid}/environ`).catch(() => undefined)),
      )
      environments.forEach((environment, k) => {
        if (!environment || Number(slice[k]) === process.pid) return
        for (const query of queries) if (holdsEntry(environment, query.entry)) query.found.push(Number(slice[k]))
      })
    }
    for (const query of queries) query.resolve(query.found)
  }
  scanning = false
}

/** `entry` as one whole NUL-separated variable of `environment`. */
function holdsEntry(environment: Buffer, entry: Buffer): boolean {
  for (let at = environment.indexOf(entry); at !== -1; at = environment.indexOf(entry, at + 1)) {
    const end = at + entry.length
    if ((at === 0 || environment[at - 1] === 0) && (end === environment.length || environment[end] === 0)) return true
  }
  return false
}

/**
 * The processes a monitored command started, followed while they are still attached: every
 * child of a tracked process is tracked, so a child that calls setsid or setpgrp (or the
 * grandchild of a double fork, if seen before its parent exits) stays known by pid and start
 * time after it left the process group. `onEscape` hears of each one that left the group.
 */
export class DescendantTracker {
  private readonly tracked = new Map<number, ProcStat>()
  private readonly escaped = new Set<number>()

  constructor(
    readonly leader: number,
    private readonly onEscape: (stat: ProcStat) => void,
  ) {
    const stat = readStat(leader)
    if (stat) this.tracked.set(leader, stat)
  }

  /** Re-reads the tracked processes and adds their new children; costs O(tracked), not O(table). */
  refresh(): void {
    const queue = [...this.tracked.keys()]
    while (queue.length > 0) {
      const pid = queue.pop() as number
      const known = this.tracked.get(pid)
      const stat = readStat(pid)
      if (!isLive(stat) || (known && stat.start !== known.start)) {
        this.tracked.delete(pid)
        continue
      }
      this.note(stat)
      for (const child of childrenOf(pid)) {
        if (this.tracked.has(child)) continue
        const childStat = readStat(child)
        if (!isLive(childStat)) continue
        this.tracked.set(child, childStat)
        queue.push(child)
      }
    }
  }

  /** Adds, from a full scan, the members of the command's session or group not yet tracked. */
  adopt(table: ProcStat[]): void {
    for (const stat of table) {
      if (!isLive(stat) || this.tracked.has(stat.pid)) continue
      if (stat.sid === this.leader || stat.pgrp === this.leader) this.tracked.set(stat.pid, stat)
    }
    this.refresh()
  }

  /** Tracks these processes from now on (found by other means, e.g. holding the output pipes). */
  track(pids: number[]): void {
    for (const pid of pids) {
      const stat = readStat(pid)
      if (isLive(stat)) this.note(stat)
    }
  }

  /** Tracked processes still running (pid not reused), as last refreshed. */
  live(): ProcStat[] {
    return [...this.tracked.values()]
  }

  private note(stat: ProcStat): void {
    this.tracked.set(stat.pid, stat)
    if (stat.pgrp !== this.leader && !this.escaped.has(stat.pid)) {
      this.escaped.add(stat.pid)
      this.onEscape(stat)
    }
  }
}

// One server-wide timer refreshes every attached tracker.
const TRACK_INTERVAL_MS = 200
const active = new Set<DescendantTracker>()
let ticker: ReturnType<typeof setInterval> | undefined

export function attach(tracker: DescendantTracker): void {
  if (!canTrack) return
  active.add(tracker)
  if (ticker === undefined) {
    ticker = setInterval(() => {
      for (const t of active) t.refresh()
    }, TRACK_INTERVAL_MS)
    ticker.unref?.()
  }
}

export function detach(tracker: DescendantTracker): void {
  active.delete(tracker)
  if (active.size === 0 && ticker !== undefined) {
    clearInterval(ticker)
    ticker = undefined
  }
}
