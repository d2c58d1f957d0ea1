import { readdirSync, readFileSync, readlinkSync } from "node:fs"
import { readdir, readFile, readlink } from "node:fs/promises"
import { attempt } from "../errors"
import {
  type EnvironmentSearch,
  type ProcessEntry,
  type ProcessTable,
  searchedTogether,
  sharedWhileRunning,
} from "./process-table"

const ENVIRON_MAX_BYTES = 4 * 1024 * 1024
const NUL = Buffer.alloc(1)

/** The /proc back end (Linux): per-process files, so a read of a few processes costs O(those). */
export function createProcTable(): ProcessTable {
  return {
    read: async (pids) => readAll(pids),
    cheap: { read: readAll, childrenOf },
    scan: sharedWhileRunning(scanAll),
    findByEnvironment: searchedTogether(findByEnvironment),
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
    outputTargets: async (pid) => [1, 2].flatMap((fd) => attempt(() => readlinkSync(`/proc/${pid}/fd/${fd}`)) ?? []),
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
  return pids.flatMap((pid) => {
    if (!Number.isInteger(pid) || pid <= 0) return []
    const stat = attempt(() => readFileSync(`/proc/${pid}/stat`, "latin1"))
    return (stat !== undefined && parseStat(pid, stat)) || []
  })
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

/** Direct children of a process (every thread's), from /proc/<pid>/task/<tid>/children. */
function childrenOf(pid: number): number[] {
  return (attempt(() => readdirSync(`/proc/${pid}/task`)) ?? []).flatMap((tid) => {
    const text = attempt(() => readFileSync(`/proc/${pid}/task/${tid}/children`, "latin1").trim())
    return text ? text.split(" ").map(Number) : []
  })
}

/** The pid directories of /proc (none if it cannot be read). */
async function processIds(): Promise<number[]> {
  const entries = await readdir("/proc").catch(() => [] as string[])
  return entries.filter((entry) => entry.charCodeAt(0) >= 48 && entry.charCodeAt(0) <= 57).map(Number)
}

/** `/proc/<pid>/<file>` of every readable process, `batch` at a time and yielding: thousands never stall the loop. */
async function eachProcessFile(file: string, batch: number, visit: (pid: number, content: Buffer) => void) {
  const pids = await processIds()
  for (let i = 0; i < pids.length; i += batch) {
    const slice = pids.slice(i, i + batch)
    const contents = await Promise.all(slice.map((pid) => readFile(`/proc/${pid}/${file}`).catch(() => undefined)))
    for (const [k, content] of contents.entries()) if (content) visit(slice[k] as number, content)
  }
}

async function scanAll(): Promise<ProcessEntry[]> {
  const entries: ProcessEntry[] = []
  await eachProcessFile("stat", 64, (pid, stat) => {
    const entry = parseStat(pid, stat.toString("latin1"))
    if (entry) entries.push(entry)
  })
  return entries
}

/** Reads every process's descriptors, yielding: for the rare case of pipes held open after the command ended. */
async function findHolders(targets: readonly string[]): Promise<number[]> {
  const wanted = new Set(targets)
  const holders: number[] = []
  for (const pid of await processIds()) {
    if (pid === process.pid) continue
    for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
      const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => undefined)
      if (target !== undefined && wanted.has(target)) {
        holders.push(pid)
        break
      }
    }
  }
  return holders
}

/** Reads the environment of every process this user may read; other users' are skipped. */
async function findByEnvironment(entries: string[]): Promise<EnvironmentSearch[]> {
  // A whole variable only: the entry between two NULs, in the environment framed by a NUL at each end.
  const wanted = entries.map((entry) => ({ entry: Buffer.from(`\0${entry}\0`), found: [] as number[] }))
  await eachProcessFile("environ", 32, (pid, environment) => {
    if (pid === process.pid) return
    const framed = Buffer.concat([NUL, environment, NUL])
    for (const query of wanted) if (framed.includes(query.entry)) query.found.push(pid)
  })
  // An environment this user may read is read whole: nothing is left unknown.
  return wanted.map(({ found }) => ({ found, unreadable: [] }))
}
