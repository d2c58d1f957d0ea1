export type MonitorErrorCode =
  | "cap_reached"
  | "invalid_pattern"
  | "invalid_argument"
  | "spawn_failed"
  | "permission_denied"
  | "not_found"

/** An error the agent can act on; `code` is stable, the message says what to do next. */
export class MonitorError extends Error {
  override name = "MonitorError"
  constructor(
    readonly code: MonitorErrorCode,
    message: string,
  ) {
    super(message)
  }
}
