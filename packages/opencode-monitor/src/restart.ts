import { formatEnding, formatStatus } from "./codec"
import { MonitorError } from "./errors"
import type { MonitorInfo, StopOutcome, StopResult } from "./monitor-run"
import { cancelReason, type MonitorSlots, type Reservation } from "./slots"
import type { StartRequest } from "./start-request"

export type RestartResult = { previous: StopResult; started: MonitorInfo }

/** The parts of the manager a restart runs through. */
export type RestartSteps = {
  old: { info: MonitorInfo; request: StartRequest }
  slots: MonitorSlots
  /** Stops the old monitor (a stop the agent asked for); resolves once its processes are gone. */
  stop: () => Promise<StopResult>
  /** Starts a request in a slot taken for it. */
  launch: (slot: Reservation, request: StartRequest) => Promise<MonitorInfo>
}

/**
 * monitor_restart: stops the old monitor, waits until its processes are gone (so the port they held
 * is free), then starts its request again. A running monitor hands its own slot over, once.
 */
export async function restartMonitor({ old, slots, stop, launch }: RestartSteps): Promise<RestartResult> {
  const slot = slots.take(old.info.sessionID, { of: old.info.id, running: old.info.status.kind === "running" })
  try {
    const previous = await stop()
    try {
      return { previous, started: await launch(slot, old.request) }
    } catch (error) {
      throw error instanceof MonitorError ? restartFailed(previous, slot, error) : error
    }
  } finally {
    slots.release(slot)
  }
}

/** A restart whose new start failed: the agent learns how the old monitor ended, and why nothing replaced it. */
function restartFailed({ info, outcome }: StopResult, slot: Reservation, error: MonitorError): MonitorError {
  const old = `The old monitor ${info.id} (${info.label}) ${howItEnded(outcome, info)}, with status ${formatStatus(info.status)}`
  const message = slot.cancelledBy
    ? `${old}, but the new one was not started: ${cancelReason(slot.cancelledBy)}. Nothing runs in its place.`
    : `${old}, but the new one did not start: ${error.message} Nothing runs in its place; start it again with monitor_start once that is fixed.`
  return new MonitorError(error.code, message, error.fields)
}

function howItEnded(outcome: StopOutcome, info: MonitorInfo): string {
  if (outcome === "stopped") return "was stopped"
  if (outcome === "ended" || !info.ending) return "had already ended"
  return `was already ending (${formatEnding(info.ending)})`
}
