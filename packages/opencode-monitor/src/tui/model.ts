import { FolderWatch } from "../state/folder-watch"
import { projectStateDir } from "../state/format"
import { writeStopRequest } from "../state/stop-requests"
import { type MessagePart, monitorsFromMessages } from "./from-messages"
import { type CachedRecord, type LocalSnapshot, readLocalState, safely, withRemembered } from "./local-state"
import { dialogOption, detailRows, type MonitorView, ordered, REMOTE_NOTE, type Tone } from "./view"

// What the TUI part shows, as plain logic `index.ts` only renders. Nothing here may throw onto the screen.

/** How long a monitor seen in the messages waits for a local state record before the fallback shows it. */
const FALLBACK_GRACE_MS = 2_000
const DETAIL_WIDTH = 100
/** How often the records are read again, and the elapsed times tick. */
export const REFRESH_MS = 250

export type SessionMonitors = { monitors: MonitorView[]; local: boolean; notes: string[] }
export type DialogOption = { title: string; value: string; description?: string; category?: string }

const EMPTY: LocalSnapshot = { monitors: [], notes: [], liveServers: [] }

/** The project's state folder, or "" when it cannot be known. */
export function stateFolderOf(directory: string): string {
  return safely(() => projectStateDir(directory), "")
}

/** Reads the records whenever they may have changed; `onChange` gets each snapshot that differs from the last. */
export function watchLocalState(folder: string, onChange: (snapshot: LocalSnapshot) => void): () => void {
  const seen = new Map<string, MonitorView>()
  const records = new Map<string, CachedRecord>()
  let lastText = ""
  const pass = async () => {
    const read = folder ? await readLocalState(folder, { cache: records }).catch(() => EMPTY) : EMPTY
    const next = { ...read, monitors: safely(() => withRemembered(seen, read.monitors), read.monitors) }
    const text = safely(() => JSON.stringify(next), "")
    if (text === lastText) return
    lastText = text
    safely(() => onChange(next), undefined)
  }
  const watch = new FolderWatch(folder, pass, REFRESH_MS)
  return () => watch.close()
}

/** A session's monitors: from a local server's record, else (a remote server, or no record yet) from its messages. */
export function monitorsOfSession(
  snapshot: LocalSnapshot,
  sessionID: string,
  parts: () => MessagePart[],
  now: number,
): SessionMonitors {
  return safely(
    () => {
      const local = snapshot.liveServers.length > 0 || snapshot.monitors.some((m) => m.sessionID === sessionID)
      const monitors = local
        ? snapshot.monitors.filter((m) => m.sessionID === sessionID)
        : monitorsFromMessages(sessionID, parts(), now).filter((m) => now - m.startedAt >= FALLBACK_GRACE_MS)
      return { monitors, local, notes: snapshot.notes }
    },
    { monitors: [], local: false, notes: [] },
  )
}

const THEME_COLOR = {
  title: "text",
  text: "text",
  running: "info",
  success: "success",
  error: "error",
  warning: "warning",
  muted: "textMuted",
} as const satisfies Record<Tone, string>

export function colorOf<C>(theme: Record<(typeof THEME_COLOR)[Tone], C>, tone: Tone): C {
  return theme[THEME_COLOR[tone]]
}

export function listDialog(found: SessionMonitors, now: number) {
  const monitors = ordered(found.monitors)
  const notes = [...found.notes, ...(found.local ? [] : monitors.length > 0 ? [REMOTE_NOTE] : [])]
  const options: DialogOption[] = [
    ...monitors.map((monitor) => ({ ...dialogOption(monitor, now), value: monitor.id })),
    ...notes.map((note) => ({ title: note, value: `note:${note}`, category: "Notes" })),
  ]
  return { title: monitors.length === 0 ? "Monitors: none in this session" : "Monitors", options, monitors }
}

/** One monitor's dialog: its actions (Stop only where a stop request can reach its server), then its rows. */
export function detailDialog(monitor: MonitorView, local: boolean, now: number) {
  const rows = detailRows(monitor, now, DETAIL_WIDTH)
  const running = monitor.status.kind === "running"
  if (running && !local)
    rows.push({ text: "Stop is not available: this TUI is not on the server's machine.", tone: "muted" })
  const actions: DialogOption[] = [
    ...(running && local && monitor.serverPid !== undefined
      ? [{ title: "Stop", value: "stop", description: "SIGTERM to its process group, SIGKILL after the grace" }]
      : []),
    { title: "Refresh", value: "refresh" },
    { title: "Back", value: "back" },
  ]
  const options: DialogOption[] = [
    ...actions.map((a) => ({ ...a, category: "Actions" })),
    ...rows.slice(1).map((row, index) => ({ title: row.text, value: `row:${index}`, category: "Monitor" })),
  ]
  // Its rows are a read-out, not a list to search: typing does not filter them.
  return { title: rows[0]?.text ?? monitor.id, options, skipFilter: true }
}

/** Asks the monitor's server to stop it; the toast text says what happened. */
export function requestStop(folder: string, sessionID: string, monitor: MonitorView) {
  try {
    writeStopRequest(folder, { serverPid: monitor.serverPid ?? 0, sessionID, monitorId: monitor.id })
    return { variant: "info" as const, message: `Stop requested: ${monitor.label} (${monitor.id})` }
  } catch (error) {
    return {
      variant: "error" as const,
      message: `Could not request the stop (${error instanceof Error ? error.message : String(error)}); ask the agent to call monitor_stop.`,
    }
  }
}

export function sessionOfRoute(route: { name: string; params?: unknown }): string | undefined {
  if (route.name !== "session") return undefined
  const id = (route.params as { sessionID?: unknown } | undefined)?.sessionID
  return typeof id === "string" ? id : undefined
}
