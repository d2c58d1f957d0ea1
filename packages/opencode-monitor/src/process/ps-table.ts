import { execFile, spawnSync } from "node:child_process"
import type { ProcessEntry, ProcessTable } from "./process-table"

/**
 * The `ps` back end, for systems without /proc (macOS). Only what Linux procps and macOS ps both
 * accept: `-A`, `-p list`, `-ww`, repeated `-o keyword=` with `pid ppid pgid stat lstart command`.
 * Not used: `sess` (macOS prints the kernel's session pointer, not an id: session leadership comes from STAT's `s`,
 * which both document), `etimes` (procps only). `lstart` runs under LC_ALL=C and TZ=UTC0 so its
 * text is the same for every reader. The environment listing is the one thing without a common
 * flag (procps: BSD `e`; macOS: `-E`, where `e` would mean "all processes"), so it follows the platform.
 * What ps cannot see at all, the holders of a pipe, comes from `lsof` when it is installed.
 */
export type PsTableOptions = {
  platform?: NodeJS.Platform
  /** The lsof program; null: treat it as not installed. */
  lsof?: string | null
}

const FIELDS = ["-o", "pid=", "-o", "ppid=", "-o", "pgid=", "-o", "stat=", "-o", "lstart="]
const PS_ENV = { ...process.env, LC_ALL: "C", TZ: "UTC0" }
const MAX_OUTPUT = 32 * 1024 * 1024
const TIMEOUT_MS = 10_000

export function createPsTable(options: PsTableOptions = {}): ProcessTable {
  const environmentFlag = environmentListingFlag(options.platform ?? process.platform)
  const lsof = options.lsof === undefined ? "lsof" : options.lsof
  let inflightScan: Promise<ProcessEntry[]> | undefined
  return {
    kind: "ps",
    read(pids) {
      const wanted = pids.filter((pid) => Number.isInteger(pid) && pid > 0)
      if (wanted.length === 0) return []
      return parseTable(runSync("ps", [...FIELDS, "-p", wanted.join(",")]) ?? "").filter((e) => wanted.includes(e.pid))
    },
    listsChildren: false,
    childrenOf: () => [],
    scan() {
      inflightScan ??= run("ps", ["-A", ...FIELDS])
        .then(parseTable)
        .finally(() => {
          inflightScan = undefined
        })
      return inflightScan
    },
    findByEnvironment: environmentSearch(environmentFlag),
    environmentValue(pid, name) {
      // The environment follows the command line in ps's listing: the last `name=` word is its
      // (a value with spaces would be cut: the monitor's token is hex).
      const text = runSync("ps", ["-ww", ...ENV_FIELDS, environmentFlag, "-p", String(pid)])
      const prefix = `${name}=`
      const words = parseEnvironmentListing(text ?? "").get(pid) ?? []
      return [...words]
        .reverse()
        .find((word) => word.startsWith(prefix))
        ?.slice(prefix.length)
    },
    commandName(pid) {
      const name = runSync("ps", ["-o", "comm=", "-p", String(pid)])?.trim()
      return name ? name.slice(name.lastIndexOf("/") + 1) : undefined
    },
    outputTargets(pid) {
      if (lsof === null) return []
      const text = runSync(lsof, ["-n", "-P", "-w", "-a", "-p", String(pid), "-d", "1,2", "-F", "ftDi"])
      return [...new Set(parseLsof(text ?? "").get(pid) ?? [])]
    },
    async findHolders(targets) {
      if (lsof === null || targets.length === 0) return []
      const wanted = new Set(targets)
      const holders: number[] = []
      for (const [pid, files] of parseLsof(await run(lsof, ["-n", "-P", "-w", "-F", "ftDi"]))) {
        if (pid !== process.pid && files.some((f) => wanted.has(f))) holders.push(pid)
      }
      return holders
    },
    watchdogFunctions: (variable) => [
      // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions, not a template
      'alive() { for e in $known; do s=$(LC_ALL=C TZ=UTC0 ps -o lstart= -p "${e%%:*}" 2>/dev/null | tr -d " ") ; [ -n "$s" ] && [ "$s" = "${e#*:}" ] && printf "%s " "${e%%:*}"; done; }',
      `bytok() { ps -A -ww -o pid= -o command= ${environmentFlag} 2>/dev/null | awk -v t="${variable}=$tok" '{ for (i = 2; i <= NF; i++) if ($i == t) { printf "%s ", $1; break } }'; }`,
      'pgid() { ps -o pgid= -p "$1" 2>/dev/null | tr -d " "; }',
    ],
  }
}

/**
 * Processes other than this one whose environment (as ps lists it) holds `entry` as one word.
 * Queries made while a listing runs are answered together by the next one: concurrent stops run
 * ps once, not once each (each listing is every process's whole environment).
 */
function environmentSearch(environmentFlag: string): (entry: string) => Promise<number[]> {
  let queued: { entry: string; resolve: (pids: number[]) => void }[] = []
  let listingRuns = false
  const drain = async () => {
    await new Promise((resolve) => setTimeout(resolve, 0))
    while (queued.length > 0) {
      const queries = queued
      queued = []
      const rows = parseEnvironmentListing(await run("ps", ["-A", "-ww", ...ENV_FIELDS, environmentFlag]))
      for (const query of queries) {
        const found: number[] = []
        for (const [pid, words] of rows) if (pid !== process.pid && words.includes(query.entry)) found.push(pid)
        query.resolve(found)
      }
    }
    listingRuns = false
  }
  return (entry) =>
    new Promise((resolve) => {
      queued.push({ entry, resolve })
      if (!listingRuns) {
        listingRuns = true
        void drain()
      }
    })
}

const ENV_FIELDS = ["-o", "pid=", "-o", "command="]

/** How ps is asked to append each process's environment to its command line. */
export function environmentListingFlag(platform: NodeJS.Platform): string {
  return platform === "darwin" ? "-E" : "e"
}

const ROW = /^\s*(\d+)\s+(\d+)\s+(-?\d+)\s+(\S+)\s+(\S.*\S)\s*$/

/** `pid ppid pgid stat lstart` rows; a row that does not parse (ps output is untrusted) is skipped. */
export function parseTable(text: string): ProcessEntry[] {
  const entries: ProcessEntry[] = []
  for (const line of text.split("\n")) {
    const row = ROW.exec(line)
    if (!row) continue
    const [, pid, ppid, pgid, stat, lstart] = row as unknown as [string, string, string, string, string, string]
    entries.push({
      pid: Number(pid),
      ppid: Number(ppid),
      pgrp: Number(pgid),
      sid: undefined,
      sessionLeader: stat.slice(1).includes("s"),
      state: stat.charAt(0),
      start: lstart.replace(/\s+/g, ""),
    })
  }
  return entries
}

/** `pid command… NAME=value…` rows: the words of each, by pid. */
function parseEnvironmentListing(text: string): Map<number, string[]> {
  const rows = new Map<number, string[]>()
  for (const line of text.split("\n")) {
    const words = line.trim().split(/\s+/)
    const pid = Number(words[0])
    if (Number.isInteger(pid) && pid > 0) rows.set(pid, words.slice(1))
  }
  return rows
}

/**
 * lsof's field output (`p` pid, then per descriptor `f` fd, `t` type, `D` device, `i` inode): the
 * identity of each open file of each process, as `type:device:inode`, which is the same for every
 * holder of one pipe or socket on Linux and on macOS.
 */
export function parseLsof(text: string): Map<number, string[]> {
  const files = new Map<number, string[]>()
  let pid = 0
  let current: { t: string; D: string; i: string } | undefined
  const flush = () => {
    if (current && pid > 0 && (current.D || current.i)) files.get(pid)?.push(`${current.t}:${current.D}:${current.i}`)
    current = undefined
  }
  for (const line of text.split("\n")) {
    const field = line.charAt(0)
    const value = line.slice(1)
    if (field === "p") {
      flush()
      pid = Number(value)
      if (!files.has(pid)) files.set(pid, [])
    } else if (field === "f") {
      flush()
      current = { t: "", D: "", i: "" }
    } else if (current && (field === "t" || field === "D" || field === "i")) current[field] = value
  }
  flush()
  return files
}

function runSync(file: string, args: string[]): string | undefined {
  const result = spawnSync(file, args, { encoding: "latin1", env: PS_ENV, maxBuffer: MAX_OUTPUT, timeout: TIMEOUT_MS })
  return result.error ? undefined : result.stdout
}

function run(file: string, args: string[]): Promise<string> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { encoding: "latin1", env: PS_ENV, maxBuffer: MAX_OUTPUT, timeout: TIMEOUT_MS },
      // ps exits 1 when a selection matched nothing, lsof when a file is not found: the output still counts.
      (_error, stdout) => resolve(typeof stdout === "string" ? stdout : ""),
    )
  })
}
