import { formatStatus } from "../codec"
import { MonitorError } from "../errors"
import type { MonitorInfo } from "../monitor-run"

/** A monitor as the tools answer it to the agent (JSON field names are the tools' contract). */
export function describeMonitor(info: MonitorInfo) {
  const c = info.counters
  return {
    monitor_id: info.id,
    label: info.label,
    status: formatStatus(info.status),
    started_at: new Date(info.startedAt).toISOString(),
    ...(info.endedAt ? { ended_at: new Date(info.endedAt).toISOString() } : {}),
    ...(info.pattern ? { match_pattern: info.pattern } : {}),
    ...(info.wakePattern ? { wake_pattern: info.wakePattern, wake_limit: info.wakeLimit } : {}),
    ...(info.silenceMs !== undefined ? { wake_on_silence_ms: info.silenceMs } : {}),
    deadline: deadlineText(info),
    counters: {
      total: c.total,
      matched: c.matched,
      unmatched: c.unmatched,
      dropped_matched: c.droppedMatched,
      dropped_unmatched: c.droppedUnmatched,
      bytes_dropped: c.bytesDropped,
      last_seq: c.lastSeq,
    },
  }
}

export function notFound(monitorId: string): MonitorError {
  return new MonitorError(
    "not_found",
    `No monitor ${JSON.stringify(monitorId)} in this session. monitor_list (include_exited: true) shows the ids you can use.`,
    { monitorId },
  )
}

export function deadlineText(info: Pick<MonitorInfo, "startedAt" | "timeoutMs">): string {
  if (info.timeoutMs === undefined) return "none"
  return `${new Date(info.startedAt + info.timeoutMs).toISOString()} (timeout_ms ${info.timeoutMs})`
}
