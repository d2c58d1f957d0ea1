export type MonitorErrorCode =
  | "cap_reached"
  | "invalid_pattern"
  | "invalid_argument"
  | "spawn_failed"
  | "permission_denied"
  | "not_found"
  /** A start or restart that must not go on: its session was deleted, or the plugin shuts down. */
  | "cancelled"
  /** The monitor is already being restarted by another call. */
  | "in_progress"

/** What an error or an end is about, as fields (like execa's): the logs read these, the agent reads the message. */
export type MonitorFields = {
  label?: string
  cwd?: string
  monitorId?: string
  exitCode?: number
  signal?: string
  /** The last lines the command wrote to stderr, oldest first. */
  stderrTail?: string[]
}

/** What went wrong, as one line of text: an Error's message, anything else thrown or answered (an error body) as JSON. */
export function errorText(error: unknown): string {
  if (error instanceof Error) return error.message
  try {
    return typeof error === "object" && error !== null ? JSON.stringify(error) : String(error)
  } catch {
    return String(error)
  }
}

/** An error the agent can act on; `code` is stable, the message says what to do next. */
export class MonitorError extends Error {
  override name = "MonitorError"
  constructor(
    readonly code: MonitorErrorCode,
    message: string,
    readonly fields: MonitorFields = {},
  ) {
    super(message)
  }
}

/** The value `read` gives, undefined when it throws (a process that ended meanwhile, a file that is gone). */
export function attempt<T>(read: () => T): T | undefined {
  try {
    return read()
  } catch {
    return undefined
  }
}
