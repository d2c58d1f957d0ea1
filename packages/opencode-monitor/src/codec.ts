// The one codec of the texts the plugin writes and reads back (a status, an ending, the envelope's markers),
// a leaf so that the history check, restart recovery, the TUI and the live harness all read through it.

/** What a monitor could not clean up; said with its status instead of claiming a clean end. */
export type Leftovers = {
  /** Still running after the leader exited (an escaped daemon, a group member): stopped by the monitor. */
  leftBehind?: { pid: number; name: string }[]
  /** Processes still running after the final SIGKILL, or that may not be signalled (EPERM). */
  survivors?: number[]
  /** The output pipes stayed open after the leader exited, held by a process that could not be found. */
  pipesHeld?: boolean
  /** Processes whose environment the token search could not read whole (ps cuts long rows): any may be the monitor's. */
  unsearched?: number[]
  /** Not observed by this server: what a previous server's state record says (restart recovery). */
  recorded?: true
}

export type MonitorStatus =
  | { kind: "running" }
  | ({ kind: "exited"; code: number } & Leftovers)
  | ({ kind: "signaled"; signal: string } & Leftovers)
  | ({ kind: "timed_out"; afterMs: number; signal: string | null } & Leftovers)
  | ({ kind: "stopped"; signal: string | null; byPerson?: true } & Leftovers)
  /** The server that ran it stopped while it ran (reported by the next server). */
  | ({
      kind: "lost"
      survivorPid: number | undefined
      /** The record names a leader that still runs but does not prove it is this monitor's: not signalled. */
      unverified?: { pid: number; reason: string }
    } & Leftovers)

export type StatusKind = MonitorStatus["kind"]

/** Who asked for a stop. "person": from the TUI; its exit notice is still delivered, as an observation. */
export type StopReason = "agent" | "person" | "session" | "shutdown"

/** How a run came to its end, decided once: it exited by itself, its `timeout_ms` stopped it, or `by` did. */
export type Ending = { reason: "exit" } | { reason: "deadline" } | { reason: "stop"; by: StopReason }

const STOPPED_BY: Record<StopReason, string> = {
  agent: "the agent stopped it (monitor_stop or monitor_restart)",
  person: "the person at the screen stopped it",
  session: "its session was deleted",
  shutdown: "the plugin shut down (opencode disposed it or its server stopped)",
}

export const isStopReason = (value: unknown): value is StopReason =>
  typeof value === "string" && Object.hasOwn(STOPPED_BY, value)

/** How a run came to its end, as a clause for tool results ("it exited by itself"). */
export function formatEnding(ending: Ending): string {
  if (ending.reason === "exit") return "it exited by itself"
  if (ending.reason === "deadline") return "its deadline (timeout_ms) stopped it"
  return STOPPED_BY[ending.by]
}

export const ENVELOPE_START = "[OMO MONITOR OUTPUT]"
export const ENVELOPE_END = "[END OMO MONITOR OUTPUT]"
// The marker words with any whitespace between them (space, tab, NBSP, the U+2000 spaces…).
const MARKER_WORDS = /OMO\s+MONITOR\s+OUTPUT/gi

/** Process output can never spell an envelope marker. */
export function neutralizeMarkers(text: string): string {
  return text.replace(MARKER_WORDS, "OMO-MONITOR-OUTPUT")
}

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
  if (status.unsearched?.length) {
    text += `; the search for its processes could not read the whole environment of pid ${status.unsearched.join(", ")} (any of them may be one still running)`
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
      return `lost (the opencode server stopped while it ran${lostDetail(status)})`
  }
}

function lostDetail({ unverified, survivorPid }: Extract<MonitorStatus, { kind: "lost" }>): string {
  if (unverified) {
    return `; its record names process ${unverified.pid} as still running, unverified: ${unverified.reason}, so it was not signalled`
  }
  return survivorPid === undefined ? "" : `; its process ${survivorPid} is still running and could not be stopped`
}

/** The tools whose results start a monitor: their metadata names it (no output text can forge that). */
export const START_TOOLS: ReadonlySet<string> = new Set(["monitor_start", "monitor_restart"])

/** The metadata key of the text part an envelope is sent as. */
export const NOTE_KEY = "opencode-monitor"

/**
 * What an envelope says, as its text part's metadata: history, recovery and the TUI read this, never the text.
 * `key` is the delivery's dedupe key (`monitor-output:<id>:batch-<n>`).
 */
export type EnvelopeNote = {
  key: string
  monitorId: string
  batch: number
  label: string
  status: MonitorStatus
  /** Sent as a wake (a reply-wanting prompt), and why when a running command woke it. */
  wake: boolean
  wakeReason?: string
}

/** The envelope note in a part's metadata, when it is one of ours and well formed. */
export function noteOf(metadata: unknown): EnvelopeNote | undefined {
  const note = (metadata as Record<string, unknown> | undefined)?.[NOTE_KEY] as Partial<EnvelopeNote> | undefined
  if (!note || typeof note !== "object") return undefined
  const { key, monitorId, batch, label, status, wake } = note
  if (typeof key !== "string" || typeof monitorId !== "string" || typeof label !== "string") return undefined
  if (typeof batch !== "number" || typeof wake !== "boolean" || typeof status?.kind !== "string") return undefined
  return note as EnvelopeNote
}
