/**
 * Named loggers, as opencode names its own (`service`): every line says which part of the plugin
 * wrote it, e.g. `opencode-monitor.injector`. The lines go to opencode's log through the session
 * API (`app.log`).
 */
export type LogLevel = "debug" | "info" | "warn" | "error"
type LogExtra = Record<string, unknown>

/** Where log lines go: `SessionApi.log`. */
export type LogSink = { log(level: LogLevel, message: string, extra: LogExtra, service?: string): void }

export type Logger = Record<LogLevel, (message: string, extra?: LogExtra) => void>

/** The plugin's own service name; a module's logger is named `opencode-monitor.<module>`. */
export const LOG_SERVICE = "opencode-monitor"

export function namedLogger(sink: LogSink, module: string): Logger {
  const service = `${LOG_SERVICE}.${module}`
  const at =
    (level: LogLevel) =>
    (message: string, extra: LogExtra = {}) =>
      sink.log(level, message, extra, service)
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") }
}
