/**
 * Run a command as the leader of its own process group and tear the whole
 * group down reliably. A live opencode server spawns shells, so killing only
 * the leader would leave strays that outlive the test.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import type { Subprocess } from "bun"

export interface LogLine {
  /** Date.now() when the line was read. */
  at: number
  source: "stdout" | "stderr"
  text: string
}

export interface GroupProcess {
  pid: number
  proc: Subprocess<"ignore", "pipe", "pipe">
  /** Live array of every output line so far. */
  lines: LogLine[]
  /** Called for each new line; returns an unsubscribe function. */
  onLine(listener: (line: LogLine) => void): () => void
  /** Resolves when both output pipes are drained. */
  drained: Promise<void>
}

/**
 * Groups still running. If the test process ends without stop() (uncaught
 * error, Ctrl-C, a CI timeout's SIGTERM) the detached servers would outlive
 * it, since they are no longer in our process group. So on exit or on a fatal
 * signal we SIGKILL what is left; signal handlers then re-raise the signal so
 * the runner still dies the way it was asked to.
 */
const liveGroups = new Map<number, Subprocess>()
let hooksInstalled = false

function killLiveGroups(): void {
  for (const [group, leader] of liveGroups) if (stillOurs(group, leader)) signal(-group, "SIGKILL")
}

/**
 * Whether group `pgid` is still the one `leader` led: the leader runs (or is not reaped yet), or
 * no process holds its pid. Once the leader is gone, a process with its pid is someone else's, and
 * the number of an emptied group may be another program's group now (pids wrap at 32768 on some
 * machines, within a test run): that group is never signalled.
 */
function stillOurs(pgid: number, leader: Subprocess): boolean {
  if (leader.exitCode === null && leader.signalCode === null) return true
  try {
    process.kill(pgid, 0)
    return false
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH"
  }
}

function trackGroup(pgid: number, leader: Subprocess): void {
  liveGroups.set(pgid, leader)
  if (hooksInstalled) return
  hooksInstalled = true
  process.once("exit", killLiveGroups)
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    const onSignal = () => {
      killLiveGroups()
      process.removeListener(sig, onSignal)
      process.kill(process.pid, sig)
    }
    process.on(sig, onSignal)
  }
}

export function spawnGroup(cmd: string[], cwd: string, env: Record<string, string>): GroupProcess {
  const proc = Bun.spawn({
    cmd,
    cwd,
    env,
    // setsid(): the child leads a new session + process group, so `kill(-pid)` reaches everything it starts.
    detached: true,
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  })
  // Tracked until killGroup has verified the group is empty; the leader exiting alone is not enough.
  trackGroup(proc.pid, proc)
  const lines: LogLine[] = []
  const listeners = new Set<(line: LogLine) => void>()
  const push = (source: LogLine["source"], text: string) => {
    const line = { at: Date.now(), source, text }
    lines.push(line)
    for (const listener of listeners) listener(line)
  }
  const drained = Promise.all([
    pumpLines(proc.stdout, (text) => push("stdout", text)),
    pumpLines(proc.stderr, (text) => push("stderr", text)),
  ]).then(() => undefined)
  return {
    pid: proc.pid,
    proc,
    lines,
    onLine(listener) {
      listeners.add(listener)
      return () => listeners.delete(listener)
    },
    drained,
  }
}

async function pumpLines(stream: ReadableStream<Uint8Array>, emit: (line: string) => void): Promise<void> {
  const decoder = new TextDecoder()
  let buffer = ""
  try {
    for await (const chunk of stream) {
      buffer += decoder.decode(chunk, { stream: true })
      let newline = buffer.indexOf("\n")
      while (newline >= 0) {
        emit(buffer.slice(0, newline).replace(/\r$/, ""))
        buffer = buffer.slice(newline + 1)
        newline = buffer.indexOf("\n")
      }
    }
  } catch {
    // The pipe broke because the process died; whatever was read is kept.
  }
  buffer += decoder.decode()
  if (buffer.length > 0) emit(buffer)
}

export interface PsEntry {
  pid: number
  ppid: number
  pgid: number
  /** `ps`'s STAT; its first letter is the state (Z: a zombie). */
  stat: string
  command: string
}

/**
 * Every process on the machine, read from /proc where there is one: a `ps` spawn costs ~30 ms of
 * CPU on a busy machine, a /proc read ~5, and a test polls this every 25-200 ms while it waits.
 */
export function psAll(): PsEntry[] {
  return existsSync("/proc/self/stat") ? procAll() : psOutput()
}

/**
 * /proc/<pid>/stat and cmdline, shown as `ps` shows them: STAT's first letter (the state), the args
 * with a newline as a space and other control characters as `?`, `[comm]` when there are none.
 */
function procAll(): PsEntry[] {
  const entries: PsEntry[] = []
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    let stat: string
    let cmdline: string
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8")
      cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8")
    } catch {
      // It ended between the listing and the read.
      continue
    }
    // `pid (comm) state ppid pgrp …`: comm may hold spaces and parentheses, so it ends at the last ")".
    const close = stat.lastIndexOf(")")
    const [state = "", ppid, pgid] = stat.slice(close + 2).split(" ")
    const args = cmdline
      .replace(/\0+$/, "")
      .replace(/[\0\n]/g, " ")
      .replace(/[\x01-\x1f\x7f]/g, "?")
    const comm = `[${stat.slice(stat.indexOf("(") + 1, close)}]`
    entries.push({
      pid: Number(name),
      ppid: Number(ppid),
      pgid: Number(pgid),
      stat: state,
      command: args || (state === "Z" ? `${comm} <defunct>` : comm),
    })
  }
  return entries
}

function psOutput(): PsEntry[] {
  const out = Bun.spawnSync({ cmd: ["ps", "-e", "-o", "pid=,ppid=,pgid=,stat=,args="] })
  const entries: PsEntry[] = []
  for (const row of out.stdout.toString().split("\n")) {
    const match = row.trim().match(/^(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s*(.*)$/)
    if (!match) continue
    entries.push({
      pid: Number(match[1]),
      ppid: Number(match[2]),
      pgid: Number(match[3]),
      stat: match[4] ?? "",
      command: match[5] ?? "",
    })
  }
  return entries
}

const isZombie = (entry: PsEntry) => entry.stat.startsWith("Z")

/**
 * Live (non-zombie) processes that belong to the group, plus any descendant
 * that escaped into another group (a tool may call setsid itself).
 */
export function groupLeftovers(pgid: number, knownDescendants: ReadonlySet<number> = new Set()): PsEntry[] {
  return psAll().filter((e) => !isZombie(e) && (e.pgid === pgid || knownDescendants.has(e.pid)))
}

/** Every descendant pid of `root` (by parent links) in `all`, the process table at this moment by default. */
export function descendants(root: number, all: PsEntry[] = psAll()): Set<number> {
  const found = new Set<number>()
  let frontier = [root]
  while (frontier.length > 0) {
    const next: number[] = []
    for (const entry of all) {
      if (frontier.includes(entry.ppid) && !found.has(entry.pid)) {
        found.add(entry.pid)
        next.push(entry.pid)
      }
    }
    frontier = next
  }
  return found
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig)
  } catch {
    // ESRCH: already gone, which is the goal.
  }
}

export interface KillReport {
  /** The strongest signal that had to be sent. */
  signal: "SIGTERM" | "SIGKILL"
  /** Exit code / signal of the leader, null if it never exited. */
  exitCode: number | null
  signalCode: string | null
  /** ms from SIGTERM until the leader exited. */
  leaderExitMs: number | null
  /** Processes still alive after everything; should be empty. */
  leftovers: PsEntry[]
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

async function waitUntil(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (check()) return true
    await sleep(50)
  }
  return check()
}

/**
 * A crash, as the OOM killer or a power cut would do it: SIGKILL to the group alone, no grace and
 * nothing else signalled (processes the server started in groups of their own are left to their
 * own fate). Resolves when the leader is gone.
 */
export async function crashGroup(child: GroupProcess): Promise<void> {
  signal(-child.pid, "SIGKILL")
  await child.proc.exited
  await Promise.race([child.drained, sleep(1000)])
  liveGroups.delete(child.pid)
}

/** SIGTERM the group (and stray descendants), SIGKILL after `graceMs`, then verify with the process table. */
export async function killGroup(child: GroupProcess, graceMs: number): Promise<KillReport> {
  const pgid = child.pid
  // Snapshot before signalling: once the leader dies, orphans are re-parented and untraceable.
  const strays = descendants(pgid)
  const started = Date.now()
  let leaderExitMs: number | null = null
  void child.proc.exited.then(() => {
    leaderExitMs = Date.now() - started
  })

  const signalAll = (sig: NodeJS.Signals) => {
    if (stillOurs(pgid, child.proc)) signal(-pgid, sig)
    for (const pid of strays) signal(pid, sig)
  }

  signalAll("SIGTERM")
  let sent: KillReport["signal"] = "SIGTERM"
  const clean = () => child.proc.exitCode !== null || child.proc.signalCode !== null
  const calm = await waitUntil(() => clean() && groupLeftovers(pgid, strays).length === 0, graceMs)
  if (!calm) {
    sent = "SIGKILL"
    signalAll("SIGKILL")
    await waitUntil(() => clean() && groupLeftovers(pgid, strays).length === 0, 2000)
  }
  await Promise.race([child.drained, sleep(1000)])
  const leftovers = groupLeftovers(pgid, strays)
  if (leftovers.length === 0) liveGroups.delete(pgid)
  return {
    signal: sent,
    exitCode: child.proc.exitCode,
    signalCode: child.proc.signalCode === null ? null : String(child.proc.signalCode),
    leaderExitMs,
    leftovers,
  }
}
