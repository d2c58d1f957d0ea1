import { type ChildProcess, spawn } from "node:child_process"
import type { ProcessTable } from "./process-table"

/** The leader of a monitored group as it started: its pid (the group's number) and start time. */
export type GroupLeader = { pid: number; start: string | undefined }

export type WatchdogOptions = {
  graceMs: number
  /** The monitor's processes inherit `<variable>=<token>` in their environment. */
  variable: string
  token: string
  table: ProcessTable
}

/**
 * Stops the monitor's processes when the server dies, even by SIGKILL (plugins get no hook): its `read` of a
 * pipe from the server fails at EOF. Lines before are `pid:start` of escapees, signalled only while the start
 * matches. The token is the first line: arguments are readable by any user, and an environment would make it
 * a carrier. The group is signalled by number only while it is still the monitor's (docs/security.md): an
 * armed watchdog may fire long after the group emptied.
 */
export function startWatchdog(leader: GroupLeader, options: WatchdogOptions): ChildProcess {
  const script = [
    'pg=$1; grace=$2; lead=$3; known=""; read -r tok',
    'while read -r line; do known="$known $line"; done',
    ...options.table.watchdogFunctions(options.variable),
    // `ours <token carriers>`: whether the group's number is still the monitor's.
    'ours() { [ -n "$(known=$lead; alive)" ] && return 0; for p in $1; do [ "$(pgid "$p")" = "$pg" ] && return 0; done; return 1; }',
    'carriers=$(bytok); group=""; ours "$carriers" && group="-$pg"',
    "kill -TERM $group $(alive) $carriers 2>/dev/null",
    'sleep "$grace"',
    "kill -KILL $group $(alive) $(bytok) 2>/dev/null",
  ].join("\n")
  const lead = leader.start === undefined ? "" : `${leader.pid}:${leader.start}`
  const watchdog = spawn(
    "sh",
    ["-c", script, "opencode-monitor-watchdog", String(leader.pid), String(options.graceMs / 1000), lead],
    { stdio: ["pipe", "ignore", "ignore"], detached: true },
  )
  watchdog.on("error", () => {})
  watchdog.stdin?.on("error", () => {})
  watchdog.stdin?.write(`${options.token}\n`)
  watchdog.unref()
  return watchdog
}
