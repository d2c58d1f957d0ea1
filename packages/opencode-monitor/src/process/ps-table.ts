import { execFile } from "node:child_process"
import {
  type EnvironmentSearch,
  type ProcessEntry,
  type ProcessTable,
  searchedTogether,
  sharedWhileRunning,
} from "./process-table"

export type PsTableOptions = {
  platform?: NodeJS.Platform
  /** The lsof program (one that is not installed finds nothing). */
  lsof?: string
}

const FIELDS = ["-o", "pid=", "-o", "ppid=", "-o", "pgid=", "-o", "stat=", "-o", "lstart="]
const COMMAND_FIELDS = ["-ww", "-o", "pid=", "-o", "command="]
const PS_ENV = { ...process.env, LC_ALL: "C", TZ: "UTC0" }
const MAX_OUTPUT = 32 * 1024 * 1024
const TIMEOUT_MS = 10_000
// procps ends a row at 128 KiB (its output buffer): a row this long may have lost its end.
const CUT_ROW_CHARS = 128 * 1024 - 1

/**
 * The back end without /proc (macOS): options Linux procps and macOS ps both accept, `lstart` in LC_ALL=C and UTC,
 * `lsof` for a pipe's holders (docs/macos-and-proc.md).
 */
export function createPsTable({ platform = process.platform, lsof = "lsof" }: PsTableOptions = {}): ProcessTable {
  const environmentFlag = environmentListingFlag(platform)
  return {
    async read(pids) {
      const wanted = pids.filter((pid) => Number.isInteger(pid) && pid > 0)
      if (wanted.length === 0) return []
      return parseTable(await run("ps", [...FIELDS, "-p", wanted.join(",")])).filter((e) => wanted.includes(e.pid))
    },
    cheap: undefined,
    scan: sharedWhileRunning(async () => {
      const entries = parseTable(await run("ps", ["-A", ...FIELDS]))
      // Every table lists this process: without it ps failed (missing, timed out), and nothing may read as gone.
      if (entries.some((entry) => entry.pid === process.pid)) return entries
      throw new Error("ps -A listed no processes: is ps installed and on PATH (procps on Linux)?")
    }),
    findByEnvironment: searchedTogether((entries) => searchEnvironments(entries, environmentFlag)),
    async environmentValue(pid, name) {
      const prefix = `${name}=`
      // Not in what could be read: not known (a value with spaces is cut at its first: the monitor's token is hex).
      const rows = commandRows(await run("ps", ["-p", String(pid), ...COMMAND_FIELDS, environmentFlag]))
      const [environment] = await splitEnvironments(rows)
      return environment?.words.find((word) => word.startsWith(prefix))?.slice(prefix.length)
    },
    async commandName(pid) {
      const name = (await run("ps", ["-o", "comm=", "-p", String(pid)])).trim()
      return name ? name.slice(name.lastIndexOf("/") + 1) : undefined
    },
    async outputTargets(pid) {
      const text = await run(lsof, ["-n", "-P", "-w", "-a", "-p", String(pid), "-d", "1,2", "-F", "ftDi"])
      return [...new Set(parseLsof(text).get(pid) ?? [])]
    },
    async findHolders(targets) {
      if (targets.length === 0) return []
      const wanted = new Set(targets)
      const open = [...parseLsof(await run(lsof, ["-n", "-P", "-w", "-F", "ftDi"]))]
      return open.filter(([pid, files]) => pid !== process.pid && files.some((f) => wanted.has(f))).map(([pid]) => pid)
    },
    watchdogFunctions: (variable) => [
      // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions, not a template
      'alive() { for e in $known; do s=$(LC_ALL=C TZ=UTC0 ps -o lstart= -p "${e%%:*}" 2>/dev/null | tr -d " ") ; [ -n "$s" ] && [ "$s" = "${e#*:}" ] && printf "%s " "${e%%:*}"; done; }',
      // As splitEnvironments: the rows with the environment, then without; a word counts only after
      // the command line. The entry reaches awk on its stdin (printf is the shell's own), never in arguments.
      `bytok() { { printf "%s\\n" "${variable}=$tok"; ps -A ${COMMAND_FIELDS.join(" ")} ${environmentFlag}; echo -; ps -A ${COMMAND_FIELDS.join(" ")}; } 2>/dev/null | awk '${WATCHDOG_AWK}'; }`,
      'pgid() { ps -o pgid= -p "$1" 2>/dev/null | tr -d " "; }',
    ],
  }
}

// Line 1 is the entry; then `pid command… environment…` rows; `-`; then `pid command…` rows.
const WATCHDOG_AWK = [
  "NR == 1 { t = $0; next }",
  '{ sub(/^[ \t]+/, "") }',
  '$0 == "-" { plain = 1; next }',
  "!plain { if (index($0, t)) row[$1] = $0; next }",
  "($1 in row) {",
  '  e = row[$1]; if (substr(e, 1, length($0) + 1) != $0 " ") next',
  '  n = split(substr(e, length($0) + 2), w, " ")',
  '  for (i = 1; i <= n; i++) if (w[i] == t) { printf "%s ", $1; break }',
  "}",
].join("\n")

/** A process's environment words as ps lists it (none if it exec'd between listings); `whole`: the row was not cut. */
type ListedEnvironment = { pid: number; words: string[]; whole: boolean }

/**
 * ps prints the environment after the command line, so an argument could pass for a variable: these processes
 * are listed again without it, and only what follows the command line counts (one gone by then is left out).
 */
async function splitEnvironments(withEnvironment: Map<number, Row>): Promise<ListedEnvironment[]> {
  const pids = [...withEnvironment.keys()].join(",")
  const commands = pids === "" ? new Map<number, Row>() : commandRows(await run("ps", ["-p", pids, ...COMMAND_FIELDS]))
  return [...withEnvironment].flatMap(([pid, row]) => {
    const command = commands.get(pid)?.text
    if (command === undefined) return []
    const { text } = row
    const rest = text === command ? "" : text.startsWith(`${command} `) ? text.slice(command.length + 1) : undefined
    const words = (rest ?? "").split(" ").filter((word) => word !== "")
    // The last word of a cut row may be cut itself.
    if (row.cut) words.pop()
    return { pid, words, whole: rest !== undefined && !row.cut }
  })
}

/** One `pid command…` row: the text after the pid; `cut` when ps may have ended it early. */
type Row = { text: string; cut: boolean }

/** `pid command…` rows, by pid. */
function commandRows(text: string): Map<number, Row> {
  const rows = new Map<number, Row>()
  for (const line of text.split("\n")) {
    const row = /^\s*(\d+) (.*)$/.exec(line)
    if (row) rows.set(Number(row[1]), { text: row[2] as string, cut: line.length >= CUT_ROW_CHARS })
  }
  return rows
}

/** Per entry: other processes holding it as a whole environment word, and those not listed whole. */
async function searchEnvironments(entries: string[], environmentFlag: string): Promise<EnvironmentSearch[]> {
  const rows = commandRows(await run("ps", ["-A", ...COMMAND_FIELDS, environmentFlag]))
  rows.delete(process.pid)
  for (const [pid, row] of rows) {
    if (!row.cut && !entries.some((entry) => row.text.includes(entry))) rows.delete(pid)
  }
  const listed = await splitEnvironments(rows)
  return entries.map((entry) => ({
    found: listed.filter(({ words }) => words.includes(entry)).map(({ pid }) => pid),
    unreadable: listed.filter(({ words, whole }) => !whole && !words.includes(entry)).map(({ pid }) => pid),
  }))
}

/** How ps is asked to append each process's environment to its command line. */
export function environmentListingFlag(platform: NodeJS.Platform): string {
  return platform === "darwin" ? "-E" : "e"
}

const ROW = /^\s*(\d+)\s+(\d+)\s+(-?\d+)\s+(\S+)\s+(\S.*\S)\s*$/

/** `pid ppid pgid stat lstart` rows; a row that does not parse (ps output is untrusted) is skipped. */
export function parseTable(text: string): ProcessEntry[] {
  return text.split("\n").flatMap((line) => {
    const row = ROW.exec(line)
    if (!row) return []
    const [, pid, ppid, pgid, stat, lstart] = row as unknown as [string, string, string, string, string, string]
    return {
      pid: Number(pid),
      ppid: Number(ppid),
      pgrp: Number(pgid),
      sid: undefined,
      sessionLeader: stat.slice(1).includes("s"),
      state: stat.charAt(0),
      start: lstart.replace(/\s+/g, ""),
    }
  })
}

/**
 * lsof's field output (`p` pid; per descriptor `f`, `t` type, `D` device, `i` inode) as `type:device:inode` per open
 * file: the same for every holder of one pipe or socket, on Linux and macOS.
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
