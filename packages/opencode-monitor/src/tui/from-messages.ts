import { parseEnvelopes } from "../codec"
import { STATE_LAST_LINES, type StateLine } from "../state/format"
import type { MonitorView } from "./view"

/**
 * The fallback when no local state file describes the session (the TUI is attached to a server on
 * another machine, or the server part is too old to write one): what the session's messages
 * show — monitor_start results and the envelopes delivered so far. Stop is not possible from here.
 */
export type MessagePart = {
  type: string
  /** When the message holding the part was created (ms). */
  at?: number
  text?: string
  tool?: string
  state?: { status?: string; input?: unknown; output?: unknown; metadata?: unknown; time?: { start?: number } }
}

const START_RESULT = /Started monitor (mon_[\w-]+) \(label: ([^)\n]*)\)/
const LINE = /^\[(stdout|stderr) seq=(\d+)\] (.*)$/

export function monitorsFromMessages(sessionID: string, parts: readonly MessagePart[], now: number): MonitorView[] {
  const byId = new Map<string, MonitorView>()
  const entry = (id: string, label: string, at: number): MonitorView => {
    let view = byId.get(id)
    if (!view) {
      view = {
        id,
        sessionID,
        label,
        startedAt: at,
        endedAt: undefined,
        statusKind: "running",
        status: "running",
        stoppedBy: undefined,
        pid: 0,
        pidStartTime: undefined,
        linesSeen: 0,
        lastLines: [],
        serverPid: undefined,
      }
      byId.set(id, view)
    }
    return view
  }
  for (const part of parts) {
    if (part.type === "tool" && part.tool === "monitor_start" && part.state?.status === "completed") {
      const output = typeof part.state.output === "string" ? part.state.output : ""
      const started = output.match(START_RESULT)
      if (started) entry(started[1] as string, started[2] as string, part.state.time?.start ?? part.at ?? now)
      continue
    }
    if (part.type !== "text" || typeof part.text !== "string") continue
    // An envelope is a message of its own: a person quoting one mid-text is not one.
    const head = parseEnvelopes(part.text)[0]
    if (head?.at !== 0) continue
    const view = entry(head.monitorId, head.label, part.at ?? now)
    const lines: StateLine[] = []
    for (const raw of part.text.split("\n")) {
      const line = raw.match(LINE)
      if (line) lines.push({ stream: line[1] as "stdout" | "stderr", seq: Number(line[2]), text: line[3] as string })
    }
    const seqs = lines.map((l) => l.seq)
    view.linesSeen = Math.max(view.linesSeen, ...seqs)
    view.lastLines = [...view.lastLines, ...lines].slice(-STATE_LAST_LINES)
    if (head.status) {
      view.status = head.statusText
      view.statusKind = head.status.kind
      if (view.statusKind !== "running") view.endedAt ??= part.at ?? now
    }
  }
  return [...byId.values()]
}
