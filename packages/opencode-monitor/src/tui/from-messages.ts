import { STATE_LAST_LINES, type StateLine, type StateStatusKind } from "../state/format"
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
const HEAD = /^\[OMO MONITOR OUTPUT\]\nmonitor_id: (\S+)\nbatch: \d+\ncommand_label: (.*)\n/
const LINE = /^\[(stdout|stderr) seq=(\d+)\] (.*)$/
const STATUS = /^Status: (.*)$/m

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
    const head = part.text.match(HEAD)
    if (!head) continue
    const view = entry(head[1] as string, head[2] as string, part.at ?? now)
    const lines: StateLine[] = []
    for (const raw of part.text.split("\n")) {
      const line = raw.match(LINE)
      if (line) lines.push({ stream: line[1] as "stdout" | "stderr", seq: Number(line[2]), text: line[3] as string })
    }
    const seqs = lines.map((l) => l.seq)
    view.linesSeen = Math.max(view.linesSeen, ...seqs)
    view.lastLines = [...view.lastLines, ...lines].slice(-STATE_LAST_LINES)
    const status = part.text.match(STATUS)?.[1]
    if (status) {
      view.status = status
      view.statusKind = statusKindOf(status)
      if (view.statusKind !== "running") view.endedAt ??= part.at ?? now
    }
  }
  return [...byId.values()]
}

export function statusKindOf(status: string): StateStatusKind {
  if (status === "running") return "running"
  if (status.startsWith("exited (code=")) return "exited"
  if (status.startsWith("exited (signal=")) return "signaled"
  if (status.startsWith("timed out")) return "timed_out"
  if (status.startsWith("stopped")) return "stopped"
  return "failed"
}
