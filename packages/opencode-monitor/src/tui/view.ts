import { formatStatus, type StatusKind } from "../codec"
import { type MonitorStateEntry, runningFirst } from "../state/format"
import { displayWidth, formatElapsed, screenLine, truncateToWidth } from "./text"

/** One monitor as the TUI shows it, from a state record or from the session's messages: never its process. */
export type MonitorView = Omit<MonitorStateEntry, "pid" | "pidStartTime" | "wakePending" | "tokenHash"> & {
  /** The live server a stop request goes to; undefined when none can take one. */
  serverPid: number | undefined
}

export type Tone = "title" | "running" | "success" | "error" | "warning" | "muted" | "text"
export type Row = { text: string; tone: Tone }

/** Shown under monitors read from the session's messages (no local state file: a remote server). */
export const REMOTE_NOTE = "(from messages; stop unavailable)"

/**
 * Width: the opencode 1.18 sidebar leaves 36 cells to a sidebar_content slot (measured under tmux). An ended
 * monitor stays in the list `keepEndedMs`, at most `maxEnded` of them, then folds into the count.
 */
export const SIDEBAR_DEFAULTS = { width: 36, keepEndedMs: 60_000, maxEnded: 3 }

export type SidebarOptions = typeof SIDEBAR_DEFAULTS & { now: number; note?: string }

const labelOf = (monitor: MonitorView) => screenLine(monitor.label) || "command"
const linesOf = (monitor: MonitorView) => `${monitor.linesSeen} ${monitor.linesSeen === 1 ? "line" : "lines"}`

/** The short status: `running 12s`, `exited (code=3)`, `timed out`, `stopped`, `lost`. */
export function shortStatus(monitor: MonitorView, now: number): string {
  const { status } = monitor
  switch (status.kind) {
    case "running":
      return `running ${formatElapsed(now - monitor.startedAt)}`
    case "exited":
    case "signaled": {
      // From a message, a status is whatever the part's metadata holds: only a plain exit is shown as written.
      const text = screenLine(formatStatus(status))
      return /^exited \((code|signal)=[\w-]{1,16}\)$/.test(text) ? text : status.kind
    }
    case "timed_out":
      return "timed out"
    case "stopped":
      return status.byPerson ? "stopped by you" : "stopped"
    default:
      return status.kind
  }
}

const TONES: Partial<Record<StatusKind, Tone>> = {
  running: "running",
  stopped: "muted",
  timed_out: "warning",
  lost: "warning",
}

function toneOf({ status }: MonitorView): Tone {
  if (status.kind === "exited") return status.code === 0 ? "success" : "error"
  return TONES[status.kind] ?? "error"
}

export const ordered = (monitors: readonly MonitorView[]) => runningFirst(monitors, (m) => m.status.kind === "running")

export function sidebarRows(monitors: readonly MonitorView[], options: SidebarOptions): Row[] {
  if (monitors.length === 0) return []
  const width = Math.max(8, options.width)
  const all = ordered(monitors)
  const running = all.filter((m) => m.status.kind === "running")
  const recent = all
    .filter((m) => m.status.kind !== "running" && options.now - (m.endedAt ?? m.startedAt) <= options.keepEndedMs)
    .slice(0, options.maxEnded)
  const folded = all.length - running.length - recent.length
  const title = `Monitors${running.length > 0 ? ` (${running.length} running)` : ""}`
  const rows: Row[] = [{ text: truncateToWidth(title, width), tone: "title" }]
  for (const monitor of [...running, ...recent]) {
    const status = shortStatus(monitor, options.now)
    const room = width - displayWidth(status) - 3
    const label = truncateToWidth(labelOf(monitor), Math.max(1, room))
    const gap = " ".repeat(Math.max(1, width - 2 - displayWidth(label) - displayWidth(status)))
    rows.push({ text: truncateToWidth(`• ${label}${gap}${status}`, width), tone: toneOf(monitor) })
    const last = monitor.lastLines.at(-1)
    const detail = `  ${linesOf(monitor)}${last ? ` › ${screenLine(last.text)}` : ""}`
    rows.push({ text: truncateToWidth(detail, width), tone: "muted" })
  }
  if (folded > 0) rows.push({ text: truncateToWidth(`  + ${folded} ended earlier`, width), tone: "muted" })
  if (options.note) rows.push({ text: truncateToWidth(screenLine(options.note), width), tone: "muted" })
  return rows
}

export function dialogOption(monitor: MonitorView, now: number): { title: string; description: string } {
  return {
    title: truncateToWidth(labelOf(monitor), 48),
    description: `${shortStatus(monitor, now)} · ${linesOf(monitor)} · ${monitor.id}`,
  }
}

export function detailRows(monitor: MonitorView, now: number, width: number): Row[] {
  const rows: Row[] = []
  const line = (text: string, tone: Tone) => rows.push({ text: truncateToWidth(text, width), tone })
  line(`${labelOf(monitor)} (${screenLine(monitor.id)})`, "title")
  line(`Status: ${screenLine(formatStatus(monitor.status)) || monitor.status.kind}`, toneOf(monitor))
  if (monitor.ending?.reason === "stop") line(`Stopped by: ${screenLine(monitor.ending.by)}`, "muted")
  const run = formatElapsed((monitor.endedAt ?? now) - monitor.startedAt)
  line(`Started: ${new Date(monitor.startedAt).toISOString()} (${run} run)`, "muted")
  const none = "none (runs until it exits or is stopped)"
  const deadline = monitor.deadlineAt === undefined ? none : new Date(monitor.deadlineAt).toISOString()
  if (monitor.status.kind === "running") line(`Deadline: ${deadline}`, "muted")
  line(`Lines seen: ${monitor.linesSeen}`, "text")
  if (monitor.lastLines.length === 0) line("No output retained.", "muted")
  else {
    line(`Last ${monitor.lastLines.length} retained lines:`, "muted")
    for (const l of monitor.lastLines)
      line(`[${l.stream} seq=${l.seq}] ${screenLine(l.text)}`, l.stream === "stderr" ? "warning" : "text")
  }
  return rows
}
