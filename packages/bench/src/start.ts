// The bench starts monitors as the unit tests do: through the one start request (monitor_start's parse).
export { type StartFields, startMonitor } from "../../opencode-monitor/test/support/start"
