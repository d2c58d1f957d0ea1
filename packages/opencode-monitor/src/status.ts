/** What a monitor could not clean up; said with its status instead of claiming a clean end. */
export type Leftovers = {
  /** Still running after the leader exited (an escaped daemon, a group member): stopped by the monitor. */
  leftBehind?: { pid: number; name: string }[]
  /** Processes still running after the final SIGKILL, or that may not be signalled (EPERM). */
  survivors?: number[]
  /** The output pipes stayed open after the leader exited, held by a process that could not be found. */
  pipesHeld?: boolean
  /** Not observed by this server: what a previous server's state record says (restart recovery, SPEC §12). */
  recorded?: true
}

export type MonitorStatus =
  | { kind: "running" }
  | ({ kind: "exited"; code: number } & Leftovers)
  | ({ kind: "signaled"; signal: string } & Leftovers)
  | ({ kind: "timed_out"; afterMs: number; signal: string | null } & Leftovers)
  | ({ kind: "stopped"; signal: string | null; byPerson?: true } & Leftovers)
  /** The server that ran it stopped while it ran (reported by the next server, SPEC §12). */
  | ({
      kind: "lost"
      survivorPid: number | undefined
      /** The record names a leader that still runs but does not prove it is this monitor's: not signalled. */
      unverified?: { pid: number; reason: string }
    } & Leftovers)

/** The `Status:` text of an envelope, also used in tool results and toasts. */
export function formatStatus(status: MonitorStatus): string {
  if (status.kind === "running") return "running"
  let text = formatEnd(status)
  if (status.leftBehind?.length) {
    text += `; stopped what it left running: ${status.leftBehind.map((p) => `pid ${p.pid} (${p.name})`).join(", ")}`
  }
  if (status.recorded) text += ", as the previous opencode server recorded it (not observed by this server)"
  if (status.survivors?.length) {
    text += `; still running after SIGKILL: pid ${status.survivors.join(", ")} (not stopped by the monitor: stop them yourself, e.g. kill -9 <pid>)`
  }
  if (status.pipesHeld) {
    text +=
      "; a process outside the monitor's reach kept the output pipes open after the command ended (output after that is lost)"
  }
  return text
}

function formatEnd(status: Exclude<MonitorStatus, { kind: "running" }>): string {
  switch (status.kind) {
    case "exited":
      return `exited (code=${status.code})`
    case "signaled":
      return `exited (signal=${status.signal})`
    case "timed_out":
      return `timed out after ${status.afterMs} ms (signal=${status.signal ?? "none"})`
    case "stopped":
      return status.byPerson ? "stopped (by the person at the screen)" : "stopped"
    case "lost":
      if (status.unverified) {
        return `lost (the opencode server stopped while it ran; its record names process ${status.unverified.pid} as still running, unverified: ${status.unverified.reason}, so it was not signalled)`
      }
      return status.survivorPid === undefined
        ? "lost (the opencode server stopped while it ran)"
        : `lost (the opencode server stopped while it ran; its process ${status.survivorPid} is still running and could not be stopped)`
  }
}
