import type { EnvelopeNote, MonitorStatus } from "../../src/codec"
import type { SessionMessage } from "../../src/delivery/session-api"
import type { MonitorStateEntry } from "../../src/state/format"

/** An assistant message whose completed monitor_start calls returned these ids: what proves a session's monitor. */
export function startMessage(...monitorIds: string[]): SessionMessage {
  return {
    role: "assistant",
    created: 0,
    completed: 0,
    finish: "stop",
    toolRunning: false,
    synthetic: false,
    agent: undefined,
    model: undefined,
    notes: [],
    startedMonitors: monitorIds,
  }
}

/** One state-file entry: a running monitor of ses_1 with two last lines (pid 999999999: no such process). */
export function stateEntry(id: string, overrides: Partial<MonitorStateEntry> = {}): MonitorStateEntry {
  return {
    id,
    sessionID: "ses_1",
    label: `label-${id}`,
    startedAt: 1_000,
    endedAt: undefined,
    status: { kind: "running" },
    ending: undefined,
    pid: 999_999_999,
    pidStartTime: "1",
    linesSeen: 2,
    lastLines: [
      { stream: "stdout", seq: 1, text: "compiling" },
      { stream: "stderr", seq: 2, text: "warning: slow" },
    ],
    ...overrides,
  }
}

/** A user message holding one envelope the plugin sent: its text part's note says what it was. */
export function envelopeMessage(
  monitorId: string,
  batch: number,
  status: MonitorStatus,
): Partial<SessionMessage> & { role: "user" } {
  const note: EnvelopeNote = {
    key: `monitor-output:${monitorId}:batch-${batch}`,
    monitorId,
    batch,
    label: "x",
    status,
    wake: status.kind !== "running",
  }
  return {
    role: "user",
    synthetic: true,
    notes: [note],
  }
}
