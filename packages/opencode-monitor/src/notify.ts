import { formatStatus } from "./codec"
import type { SessionApi, ToastVariant } from "./delivery/session-api"
import type { MonitorInfo } from "./monitor-run"

/** The person's toast when a monitor ends; none when the session's end or a shutdown stopped it. */
export function notifyEnded(api: Pick<SessionApi, "toast">, monitor: MonitorInfo): void {
  const { ending } = monitor
  if (ending?.reason === "stop" && (ending.by === "session" || ending.by === "shutdown")) return
  api.toast(
    endVariant(monitor),
    `monitor ${monitor.label}`,
    `${monitor.label} (${monitor.id}) ${formatStatus(monitor.status)}`,
  )
}

function endVariant({ status }: MonitorInfo): ToastVariant {
  if (status.kind === "timed_out") return "warning"
  if (status.kind === "exited" && status.code === 0) return "success"
  return status.kind === "stopped" ? "info" : "error"
}
