export type MonitorStatus =
  | { kind: "running" }
  | { kind: "exited"; code: number }
  | { kind: "signaled"; signal: string }
  | { kind: "timed_out"; afterMs: number; signal: string | null }
  | { kind: "stopped"; signal: string | null; byPerson?: true }
  /** The server that ran it stopped while it ran (reported by the next server, SPEC §12). */
  | { kind: "lost"; survivorPid: number | undefined }

/** The `Status:` text of an envelope, also used in tool results and toasts. */
export function formatStatus(status: MonitorStatus): string {
  switch (status.kind) {
    case "running":
      return "running"
    case "exited":
      return `exited (code=${status.code})`
    case "signaled":
      return `exited (signal=${status.signal})`
    case "timed_out":
      return `timed out after ${status.afterMs} ms (signal=${status.signal ?? "none"})`
    case "stopped":
      return status.byPerson ? "stopped (by the person at the screen)" : "stopped"
    case "lost":
      return status.survivorPid === undefined
        ? "lost (the opencode server stopped while it ran)"
        : `lost (the opencode server stopped while it ran; its process ${status.survivorPid} is still running and could not be stopped)`
  }
}
