import { readdirSync, readFileSync, readlinkSync } from "node:fs"
import { readdir, readFile, readlink } from "node:fs/promises"
import type { EnvironmentSearch, ProcessEntry, ProcessTable } from "./process-table"

const ENVIRON_MAX_BYTES = 4 * 1024 * 1024

/** The /proc back end (Linux): per-process files, so a read of a few processes costs O(those). */
export function createProcTable(): ProcessTable {
  let inflightScan: Promise<ProcessEntry[]> | undefined
  const environment = environmentSearch()
  return {
    kind: "proc",
    read: async (pids) => readAll(pids),
    cheap: { read: readAll, childrenOf },
    scan() {
      inflightScan ??= scanAll().finally(() => {
        inflightScan = undefined
      })
      return inflightScan
    },
    findByEnvironment: environment,
    async environmentValue(pid, name) {
      const environment = await readFile(`/proc/${pid}/environ`, "latin1").catch(() => undefined)
      // Bounded by the kernel's argument limit; anything larger is not a process's environment.
      if (environment === undefined || environment.length > ENVIRON_MAX_BYTES) return undefined
      const prefix = `${name}=`
      return environment
        .split("\0")
        .find((variable) => variable.startsWith(prefix))
        ?.slice(prefix.length)
    },
    async commandName(pid) {
      return (await readFile(`/proc/${pid}/comm`, "latin1").catch(() => undefined))?.trim()
    },
    outputTargets: async (pid) => [descriptorTarget(pid, 1), descriptorTarget(pid, 2)].filter((t) => t !== undefined),
    findHolders,
    watchdogFunctions: (variable) => [
      // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions, not a template
      'alive() { for e in $known; do s=$(cat "/proc/${e%%:*}/stat" 2>/dev/null) || continue; set -- ${s##*) }; [ "${20}" = "${e#*:}" ] && printf "%s " "${e%%:*}"; done; }',
      // The entry reaches grep on its stdin (printf is the shell's own): never in a program's arguments.
      `bytok() { printf "%s\\n" "${variable}=$tok" | grep -lzxF -f - /proc/[0-9]*/environ 2>/dev/null | while IFS=/ read -r _ _ p _; do printf "%s " "$p"; done; }`,
      // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions, not a template
      'pgid() { s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; set -- ${s##*) }; printf "%s" "$3"; }',
    ],
  }
}

function readAll(pids: readonly number[]): ProcessEntry[] {
  const entries: ProcessEntry[] = []
  for (const pid of pids) {
    const entry = readStat(pid)
    if (entry) entries.push(entry)
  }
  return entries
}

/** /proc/<pid>/stat; the command name (field 2) may hold spaces and parentheses: fields restart after the last ")". */
function parseStat(pid: number, stat: string): ProcessEntry | undefined {
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  const state = fields[0]
  const start = fields[19]
  if (!state || !start) return undefined
  const sid = Number(fields[3])
  return { pid, state, ppid: Number(fields[1]), pgrp: Number(fields[2]), sid, sessionLeader: sid === pid, start }
}

function readStat(pid: number): ProcessEntry | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined
  try {
    return parseStat(pid, readFileSync(`/proc/${pid}/stat`, "latin1"))
  } catch {
    return undefined
  }
}

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

/** Every process, asynchronous and yielding, so thousands of processes do not stall the event loop. */
async function scanAll(): Promise<ProcessEntry[]> {
  const pids = await processIds()
  const entries: ProcessEntry[] = []
  for (let i = 0; i < pids.length; i += 64) {
    const slice = pids.slice(i, i + 64)
    const texts = await Promise.all(slice.map((pid) => readFile(`/proc/${pid}/stat`, "latin1").catch(() => undefined)))
    texts.forEach((text, k) => {
      const entry = text === undefined ? undefined : parseStat(Number(slice[k]), text)
      if (entry) entries.push(entry)
    })
  }
  return entries
}

/** What a process's descriptor points at (`pipe:[123]`, `socket:[456]`), or undefined. */
function descriptorTarget(pid: number, fd: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/fd/${fd}`)
  } catch {
    return undefined
  }
}

/** Reads every process's descriptors, yielding: for the rare case of pipes held open after the command ended. */
async function findHolders(targets: readonly string[]): Promise<number[]> {
  const wanted = new Set(targets)
  const holders: number[] = []
  for (const pid of await processIds()) {
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

type EnvironmentQuery = { entry: Buffer; found: number[]; resolve: (search: EnvironmentSearch) => void }

/**
 * Reads the environment of every process this user may read, yielding; other users' are skipped.
 * Queries made while a scan runs are answered together by the next one, so concurrent stops read
 * the table once.
 */
function environmentSearch(): (entry: string) => Promise<EnvironmentSearch> {
  let queued: EnvironmentQuery[] = []
  let scanning = false
  const run = async () => {
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
      // An environment this user may read is read whole: nothing is left unknown.
      for (const query of queries) query.resolve({ found: query.found, unreadable: [] })
    }
    scanning = false
  }
  return (entry) =>
    new Promise((resolve) => {
      queued.push({ entry: Buffer.from(entry), found: [], resolve })
      if (!scanning) {
        scanning = true
        void run()
      }
    })
}

/** `entry` as one whole NUL-separated variable of `environment`. */
function holdsEntry(environment: Buffer, entry: Buffer): boolean {
  for (let at = environment.indexOf(entry); at !== -1; at = environment.indexOf(entry, at + 1)) {
    const end = at + entry.length
    if ((at === 0 || environment[at - 1] === 0) && (end === environment.length || environment[end] === 0)) return true
  }
  return false
}
