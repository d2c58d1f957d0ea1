/** Named loggers, as opencode names its own: every line says which part wrote it (`opencode-monitor.injector`). */
export type LogLevel = "debug" | "info" | "warn" | "error"
type LogExtra = Record<string, unknown>

/** Where log lines go (`SessionApi.log`); `service` names the module, the plugin itself without it. */
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
