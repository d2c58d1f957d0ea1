import type { MonitorManager } from "../../opencode-monitor/src/manager"
import { parseStartRequest } from "../../opencode-monitor/src/start-request"

/** A start as a test writes it, parsed the way monitor_start parses its arguments. */
export type StartFields = {
  sessionID: string
  directory: string
  command: string
  label?: string
  matchPattern?: string
  wakePattern?: string
  wakeLimit?: number
  silenceMs?: number
  timeoutMs?: number
}

/** Starts a monitor through the one start request, as monitor_start does. */
export async function startMonitor(manager: MonitorManager, fields: StartFields) {
  const args = {
    command: fields.command,
    label: fields.label,
    match_pattern: fields.matchPattern,
    wake_pattern: fields.wakePattern,
    wake_limit: fields.wakeLimit,
    wake_on_silence_ms: fields.silenceMs,
    timeout_ms: fields.timeoutMs,
  }
  const request = await parseStartRequest(args, fields, manager.config)
  return manager.start(request)
}
