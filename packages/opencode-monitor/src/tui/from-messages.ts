import { noteOf, START_TOOLS } from "../codec"
import { STATE_LAST_LINES, type StateLine } from "../state/format"
import type { MonitorView } from "./view"

/** A message part as the TUI's state gives it, with its message's creation time. */
export type MessagePart = {
  type: string
  at?: number
  text?: string
  /** A text part's metadata: an envelope's note says what it is, as data. */
  metadata?: unknown
  tool?: string
  state?: { status?: string; input?: unknown; output?: unknown; metadata?: unknown; time?: { start?: number } }
}

const LINE = /^\[(stdout|stderr) seq=(\d+)\] (.*)$/

/** The fallback without a local record (a remote server): the session's monitor_start results and envelopes. */
export function monitorsFromMessages(sessionID: string, parts: readonly MessagePart[], now: number): MonitorView[] {
  const byId = new Map<string, MonitorView>()
  const entry = (id: string, label: string, at: number): MonitorView => {
    const view = byId.get(id) ?? {
      id,
      sessionID,
      label,
      startedAt: at,
      endedAt: undefined,
      status: { kind: "running" },
      ending: undefined,
      linesSeen: 0,
      lastLines: [],
      serverPid: undefined,
    }
    byId.set(id, view)
    return view
  }
  for (const part of parts) {
    if (part.type === "tool" && START_TOOLS.has(part.tool ?? "") && part.state?.status === "completed") {
      const started = part.state.metadata as { monitorId?: unknown; label?: unknown } | undefined
      if (typeof started?.monitorId === "string" && typeof started.label === "string")
        entry(started.monitorId, started.label, part.state.time?.start ?? part.at ?? now)
      continue
    }
    // An envelope is a text part with our note: a person quoting one has none.
    const note = part.type === "text" && typeof part.text === "string" ? noteOf(part.metadata) : undefined
    if (!note || part.text === undefined) continue
    const view = entry(note.monitorId, note.label, part.at ?? now)
    const lines = part.text.split("\n").flatMap((raw): StateLine[] => {
      const line = raw.match(LINE)
      return line ? [{ stream: line[1] as "stdout" | "stderr", seq: Number(line[2]), text: line[3] as string }] : []
    })
    view.linesSeen = Math.max(view.linesSeen, ...lines.map((l) => l.seq))
    view.lastLines = [...view.lastLines, ...lines].slice(-STATE_LAST_LINES)
    view.status = note.status
    if (note.status.kind !== "running") view.endedAt ??= part.at ?? now
  }
  return [...byId.values()]
}
