import { type ChildProcess, spawn } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import type { Readable } from "node:stream"
import type { Leftovers } from "../codec"
import { shellInvocation } from "./shell"
import { isLive, type ProcessEntry, type ProcessTable, processTable } from "./process-table"
import { attach, DescendantTracker, detach } from "./tracker"
import { startWatchdog } from "./watchdog"

export type ProcessExit = { code: number | null; signal: NodeJS.Signals | null }

export class SpawnError extends Error {
  override name = "SpawnError"
}

export type SpawnOptions = {
  command: string
  cwd: string
  killGraceMs: number
  env?: NodeJS.ProcessEnv
  /** The shell to run the command in (process/shell.ts); `sh` when not given. */
  shell?: string
  /** The process table to track and verify with (process-table.ts); this server's when not given. */
  table?: ProcessTable
  /** Adds LINE_FLUSH_ENV to the environment where it does not set those variables itself. */
  unbufferedRuntimes?: boolean
}

const POLL_MS = 25
const ENVIRONMENT_RESCAN_MS = 50
/** Set in the command's environment to a token of its monitor. */
export const TOKEN_VARIABLE = "OPENCODE_MONITOR_TOKEN"
/** Makes a runtime flush stdout per line into a pipe; only Python needs and has one (docs/delivery-and-waking.md). */
const LINE_FLUSH_ENV: Readonly<Record<string, string>> = { PYTHONUNBUFFERED: "1" }

/** `<shell> -c <command>` leading a new session and group, stdin closed, with a watchdog (watchdog.ts). */
export async function spawnInGroup(options: SpawnOptions): Promise<MonitoredProcess> {
  // Inherited by every process the command starts: finds a daemon that double-forked away too fast to be seen.
  const token = randomBytes(12).toString("hex")
  const started = await startLeader(options, token)
  const { pid, stdout, stderr } = started
  const table = options.table ?? processTable
  // Bun drops what a child wrote if it exits before its pipes are read: they are read into buffers meanwhile.
  const hold = () => {}
  for (const pipe of [stdout, stderr]) pipe.on("readable", hold)
  // The child's ends of its pipes (Bun: socket pairs), to find their holders once the leader is gone; and the
  // leader as it started, by which the watchdog and the tracker know the group.
  const [outputs, [leader]] = await Promise.all([table.outputTargets(pid), table.read([pid])]).finally(() => {
    for (const pipe of [stdout, stderr]) pipe.off("readable", hold)
  })
  return new MonitoredProcess(started, leader, { token, outputs, table, graceMs: options.killGraceMs })
}

type StartedLeader = { pid: number; stdout: Readable; stderr: Readable; exited: Promise<ProcessExit> }

/** The leader, started in its own session and group, with its pipes; SpawnError when it cannot start. */
async function startLeader(options: SpawnOptions, token: string): Promise<StartedLeader> {
  const invocation = shellInvocation(options.shell ?? "sh", options.command)
  let child: ChildProcess
  try {
    child = spawn(invocation.file, invocation.args, {
      cwd: options.cwd,
      // The command's own environment wins over the flush switches; only the token is forced.
      env: {
        ...(options.unbufferedRuntimes ? LINE_FLUSH_ENV : {}),
        ...(options.env ?? process.env),
        [TOKEN_VARIABLE]: token,
      },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    })
  } catch (error) {
    // Bun (and Node for a NUL byte) throw some spawn failures at once instead of emitting "error".
    throw new SpawnError(describeSpawnError(error as NodeJS.ErrnoException, options.cwd, invocation.file))
  }
  // Listened for before anything is awaited: a leader that exits at once must not be missed.
  const exited = new Promise<ProcessExit>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }))
  })
  await new Promise<void>((resolve, reject) => {
    child.once("spawn", () => resolve())
    child.once("error", (error) => reject(new SpawnError(describeSpawnError(error, options.cwd, invocation.file))))
  })
  const { pid, stdout, stderr } = child
  if (pid === undefined || !stdout || !stderr) throw new SpawnError("the process started without a pid or pipes")
  return { pid, stdout, stderr, exited }
}

type GroupSetup = { token: string; outputs: string[]; table: ProcessTable; graceMs: number }

/** A command leading its own process group, with its token, its escaped processes, watchdog and survivors. */
export class MonitoredProcess {
  readonly pid: number
  readonly stdout: Readable
  readonly stderr: Readable
  /** Resolves when the group leader (`sh -c`) has exited. */
  readonly exited: Promise<ProcessExit>
  /** The leader's start time as read when it started; undefined when it was gone by then. */
  readonly startTime: string | undefined
  /** sha256 (hex) of the token set in the command's environment (TOKEN_VARIABLE). */
  readonly tokenHash: string
  private readonly tracker: DescendantTracker
  private readonly watchdog: ChildProcess
  /** Still running after the final SIGKILL of the last stop, or not signallable. */
  private survivors: number[] = []
  /** Processes the token searches could not read whole, so far. */
  private readonly unsearched = new Set<number>()

  /** Starts the watchdog and the tracker; `leader`: the leader's entry as it started (undefined: gone by then). */
  constructor(
    started: StartedLeader,
    leader: ProcessEntry | undefined,
    private readonly setup: GroupSetup,
  ) {
    ;({ pid: this.pid, stdout: this.stdout, stderr: this.stderr, exited: this.exited } = started)
    const { token, table, graceMs } = setup
    this.startTime = leader?.start
    this.tokenHash = hashToken(token)
    this.watchdog = startWatchdog(
      { pid: this.pid, start: leader?.start },
      { graceMs, variable: TOKEN_VARIABLE, token, table },
    )
    // Processes that left the group are named to the watchdog, so a server SIGKILL reaches them too.
    const onEscape = (entry: ProcessEntry) => this.watchdog.stdin?.write(`${entry.pid}:${entry.start}\n`)
    this.tracker = new DescendantTracker(this.pid, onEscape, table, leader)
    attach(this.tracker)
  }

  /**
   * SIGTERM, SIGKILL after the grace; the last signal sent (null: none needed); what outlives it: `leftovers()`.
   * When the process table cannot be read (ps cannot fork), the group and the processes tracked so far get
   * SIGKILL before the error is thrown: a stop never waits on a process nobody signalled.
   */
  async terminateGroup(): Promise<NodeJS.Signals | null> {
    try {
      // One shared scan finds members never seen attached (orphans, token carriers); polls then cost O(tracked).
      await this.tracker.adopt()
      await this.tracker.track(await this.tokenCarriers())
      const gone = async () => (await liveMembers(this.pid, this.tracker)).length === 0
      const sent = await escalate((signal) => this.signalAll(signal), gone, this.setup.graceMs)
      // Verify the end: whatever is still running (or cannot be signalled) is reported by pid.
      if (sent === "SIGKILL") this.survivors = await liveMembers(this.pid, this.tracker)
      return sent
    } catch (error) {
      this.signalAll("SIGKILL")
      throw error
    }
  }

  /** SIGTERM to the whole group now, without waiting (for signal handlers). */
  signalGroupNow(): void {
    this.tracker.refresh()
    this.signalAll("SIGTERM")
  }

  /** Cheap and synchronous: the group answers a signal, or a tracked escapee runs (zombies read as alive here). */
  groupAlive(): boolean {
    if (signalGroup(this.pid, 0) !== "gone") return true
    // With ps the last tick's view (≤ 200 ms old) decides: a stale "alive" only leads to terminateGroup's check.
    this.tracker.refresh()
    return this.tracker.live().length > 0
  }

  /** After the leader exited, what still runs (found by token, open pipes, session, group, tracking), named. */
  async leftBehind(pipesOpen: boolean): Promise<NonNullable<Leftovers["leftBehind"]>> {
    const { tracker, setup } = this
    // Pipes at EOF have no writer left, so only open ones are worth the search of every descriptor.
    const holders = pipesOpen && setup.outputs.length > 0 ? await setup.table.findHolders(setup.outputs) : []
    await tracker.track([...holders, ...(await this.tokenCarriers())])
    // Mid-exec a process shows an empty environment (`setsid sh -c 'exec …'` execs twice): search again a bit later.
    await new Promise((resolve) => setTimeout(resolve, ENVIRONMENT_RESCAN_MS))
    await tracker.track(await this.tokenCarriers())
    await tracker.adopt()
    const left = tracker.live().filter((stat) => stat.pid !== this.pid)
    // A process sets its own name (any bytes): only plain characters go into the status line.
    const nameOf = async (pid: number) => ((await setup.table.commandName(pid)) ?? "").replace(/[^\w.+-]/g, "?") || "?"
    return Promise.all(left.map(async ({ pid }) => ({ pid, name: await nameOf(pid) })))
  }

  /** Survivors of the last stop, and processes whose environment was not read whole: either makes the end unclean. */
  leftovers(): Pick<Leftovers, "survivors" | "unsearched"> {
    return {
      ...(this.survivors.length > 0 ? { survivors: this.survivors } : {}),
      ...(this.unsearched.size > 0 ? { unsearched: [...this.unsearched] } : {}),
    }
  }

  /** False once the leader is reaped (its exit event may still be on its way). */
  leaderExists(): boolean {
    return signalPid(this.pid, 0) !== "gone"
  }

  /** Disarms the watchdog once the group is known to be gone. */
  release(): void {
    detach(this.tracker)
    const { watchdog } = this
    // With survivors the watchdog stays armed: it tries again if the server dies.
    if (this.survivors.length === 0 && watchdog.exitCode === null && watchdog.signalCode === null)
      watchdog.kill("SIGKILL")
  }

  /** Signals the group and the tracked processes that left it, as last refreshed. */
  private signalAll(signal: NodeJS.Signals): void {
    signalGroup(this.pid, signal)
    for (const entry of this.tracker.live()) if (entry.pgrp !== this.pid) signalPid(entry.pid, signal)
  }

  /** The processes carrying the token in their environment; those not read whole go to `unsearched`. */
  private async tokenCarriers(): Promise<number[]> {
    const search = await this.setup.table.findByEnvironment(`${TOKEN_VARIABLE}=${this.setup.token}`)
    for (const pid of search.unreadable) this.unsearched.add(pid)
    return search.found
  }
}

/** How a state record names a token without holding it. */
export function hashToken(token: string): string {
  return createHash("sha256").update(token).digest("hex")
}

type SignalResult = "sent" | "gone" | "denied"

/** Signals a whole process group (0: only whether it exists); "gone" when it no longer exists, "denied" on EPERM. */
export function signalGroup(pgid: number, signal: NodeJS.Signals | 0): SignalResult {
  return signalPid(-pgid, signal)
}

function signalPid(pid: number, signal: NodeJS.Signals | 0): SignalResult {
  try {
    process.kill(pid, signal)
    return "sent"
  } catch (error) {
    // EPERM: it exists but may not be signalled by this user; that is not "gone".
    return (error as NodeJS.ErrnoException).code === "EPERM" ? "denied" : "gone"
  }
}

/** Live processes of the group and its tracked escapees: O(tracked); a scan only if the group answers with none. */
async function liveMembers(pgid: number, tracker: DescendantTracker): Promise<number[]> {
  const group = signalGroup(pgid, 0)
  await tracker.update()
  const live = tracker.live().map((entry) => entry.pid)
  if (live.length > 0 || group === "gone") return live
  await tracker.adopt()
  const members = tracker.live().map((stat) => stat.pid)
  // Answering with no live member: zombies; but EPERM is a process we may not signal, which is not gone.
  return members.length === 0 && group === "denied" ? [pgid] : members
}

/** Live (non-zombie) members of a process group, from one asynchronous read of the process table. */
export async function liveGroupMembers(pgid: number, table: ProcessTable = processTable): Promise<number[]> {
  return (await table.scan()).filter((entry) => entry.pgrp === pgid && isLive(entry)).map((entry) => entry.pid)
}

/** SIGTERM, then SIGKILL after `graceMs`, each while `gone` says something runs, then 2 s more; the last one sent. */
export async function escalate(send: (signal: NodeJS.Signals) => void, gone: () => Promise<boolean>, graceMs: number) {
  if (await gone()) return null
  send("SIGTERM")
  if (await waitUntil(gone, graceMs)) return "SIGTERM"
  send("SIGKILL")
  await waitUntil(gone, 2_000)
  return "SIGKILL"
}

/** Polls `condition` until it holds (true) or `timeoutMs` passes (false). */
export async function waitUntil(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!(await condition())) {
    if (Date.now() >= deadline) return false
    await new Promise((resolve) => setTimeout(resolve, POLL_MS))
  }
  return true
}

function describeSpawnError(error: NodeJS.ErrnoException, cwd: string, shell: string): string {
  const start = `cannot start ${shell} in ${cwd}`
  if (error.code === "ENOENT") return `${start}: the directory or ${shell} does not exist (${error.message})`
  if (error.code === "EACCES") return `${start}: permission denied (${error.message})`
  if (error.code === "ENOTDIR") return `${start}: it is not a directory (${error.message})`
  if (error.code === "E2BIG") {
    return `the command and environment are longer than the system allows for one program (${error.message}); put a long script in a file and run that`
  }
  if (error.code === "ERR_INVALID_ARG_VALUE" && /null bytes/.test(error.message)) {
    return "the command contains a NUL byte, which no shell can receive; remove it"
  }
  return error.message
}
