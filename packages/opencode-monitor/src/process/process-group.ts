import { type ChildProcess, spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import type { Readable } from "node:stream"
import { shellInvocation } from "./shell"

export type ProcessExit = { code: number | null; signal: NodeJS.Signals | null }

export class SpawnError extends Error {
  override name = "SpawnError"
}

export interface MonitoredProcess {
  readonly pid: number
  readonly stdout: Readable
  readonly stderr: Readable
  /** Resolves when the group leader (`sh -c`) has exited. */
  readonly exited: Promise<ProcessExit>
  /** SIGTERM to the whole group, SIGKILL after `graceMs`; resolves when no member is left. */
  terminateGroup(graceMs: number): Promise<NodeJS.Signals | null>
  /** SIGTERM to the whole group now, without waiting (for signal handlers). */
  signalGroupNow(): void
  /** True while any live (non-zombie) process remains in the group. */
  groupAlive(): boolean
  /** Disarms the watchdog once the group is known to be gone. */
  release(): void
}

export type SpawnOptions = {
  command: string
  cwd: string
  killGraceMs: number
  env?: NodeJS.ProcessEnv
  /** The shell to run the command in (process/shell.ts); `sh` when not given. */
  shell?: string
}

const POLL_MS = 25

/**
 * Runs `sh -c <command>` as the leader of a new session and process group, stdin closed, stdout
 * and stderr piped. A watchdog process holds a pipe from this process: if the host dies, even by
 * SIGKILL, the pipe closes and the watchdog terminates the group (TERM, then KILL after grace),
 * because opencode gives plugins no hook on a hard kill.
 */
export async function spawnInGroup(options: SpawnOptions): Promise<MonitoredProcess> {
  const invocation = shellInvocation(options.shell ?? "sh", options.command)
  const child = spawn(invocation.file, invocation.args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  })
  await new Promise<void>((resolve, reject) => {
    child.once("spawn", () => resolve())
    child.once("error", (error) => reject(new SpawnError(describeSpawnError(error, options.cwd))))
  })
  const pid = child.pid
  if (pid === undefined || !child.stdout || !child.stderr) {
    throw new SpawnError("the process started without a pid or pipes")
  }
  const watchdog = startWatchdog(pid, options.killGraceMs)
  const exited = new Promise<ProcessExit>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }))
  })

  const groupAlive = () => isGroupAlive(pid)
  return {
    pid,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    groupAlive,
    signalGroupNow: () => signalGroup(pid, "SIGTERM"),
    async terminateGroup(graceMs) {
      if (!groupAlive()) return null
      signalGroup(pid, "SIGTERM")
      if (await waitUntil(() => !groupAlive(), graceMs)) return "SIGTERM"
      signalGroup(pid, "SIGKILL")
      await waitUntil(() => !groupAlive(), 2_000)
      return "SIGKILL"
    },
    release() {
      if (watchdog.exitCode === null && watchdog.signalCode === null) watchdog.kill("SIGKILL")
    },
  }
}

function startWatchdog(pgid: number, graceMs: number): ChildProcess {
  // `read` returns non-zero only at EOF, i.e. when every holder of the pipe's write end is gone.
  const script =
    'while read -r _; do :; done; kill -TERM -"$1" 2>/dev/null || exit 0; sleep "$2"; kill -KILL -"$1" 2>/dev/null'
  const watchdog = spawn("sh", ["-c", script, "opencode-monitor-watchdog", String(pgid), String(graceMs / 1000)], {
    stdio: ["pipe", "ignore", "ignore"],
    detached: true,
  })
  watchdog.on("error", () => {})
  watchdog.unref()
  return watchdog
}

/** Signals a whole process group; a group already gone is not an error. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal)
  } catch {
    // ESRCH: the group is already gone.
  }
}

function isGroupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0)
  } catch {
    return false
  }
  // The group still has a member, but it may only be a zombie nobody has reaped yet.
  return process.platform === "linux" ? liveGroupMembers(pgid).length > 0 : true
}

/** Live members of a process group; zombies are excluded because they run nothing. */
export function liveGroupMembers(pgid: number): number[] {
  const members: number[] = []
  for (const entry of readdirSync("/proc")) {
    if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "latin1")
    } catch {
      continue
    }
    // Fields after the parenthesised command name: state ppid pgrp ...
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    if (Number(fields[2]) === pgid && fields[0] !== "Z" && fields[0] !== "X") members.push(Number(entry))
  }
  return members
}

/** Polls `condition` until it holds (true) or `timeoutMs` passes (false). */
export async function waitUntil(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() >= deadline) return false
    await new Promise((resolve) => setTimeout(resolve, POLL_MS))
  }
  return true
}

function describeSpawnError(error: NodeJS.ErrnoException, cwd: string): string {
  if (error.code === "ENOENT") return `cannot start sh in ${cwd}: the directory or sh does not exist (${error.message})`
  if (error.code === "EACCES") return `cannot start sh in ${cwd}: permission denied (${error.message})`
  return error.message
}
