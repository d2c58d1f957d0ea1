import { MonitorError } from "./errors"
import type { MonitorInfo } from "./monitor-run"

/** Why a start under way must not go on: its session was deleted, or the plugin shuts down. */
export type StartCancel = "session" | "shutdown"

/** A slot taken before a start's first await: it counts against the cap and holds its id until released. */
export type Reservation = {
  readonly id: string
  readonly sessionID: string
  /** The monitor a restart starts again. */
  readonly restarts: string | undefined
  /** Set once when the start must not go on. */
  cancelledBy: StartCancel | undefined
}

export type SlotDeps = {
  cap: number
  /** The session's running monitors: each holds a slot. */
  running: (sessionID: string) => MonitorInfo[]
  /** The id belongs to a monitor, running or retained. */
  inUse: (id: string) => boolean
  newId: () => string
}

/** A slot held by a start under way; it resolves when the start gives it back. */
type Held = { slot: Reservation } & ReturnType<typeof Promise.withResolvers<void>>

/** Starts under way and fresh ids; a slot taken before the first await keeps concurrent starts within the cap. */
export class MonitorSlots {
  private readonly held = new Map<string, Held>()
  private shutDown = false

  constructor(private readonly deps: SlotDeps) {}

  /** `restart`: the monitor started again; a running one hands its own slot over (no cap check), once. */
  take(sessionID: string, restart?: { of: string; running: boolean }): Reservation {
    if (this.shutDown) throw cancelledStart("shutdown")
    if (restart && [...this.held.values()].some((h) => h.slot.restarts === restart.of)) {
      throw new MonitorError(
        "in_progress",
        `Monitor ${restart.of} is already being restarted by another monitor_restart call; that call's result names the new monitor (monitor_list shows it too).`,
        { monitorId: restart.of },
      )
    }
    if (!restart?.running) this.checkCap(sessionID)
    const slot: Reservation = { id: this.freshId(), sessionID, restarts: restart?.of, cancelledBy: undefined }
    this.held.set(slot.id, { slot, ...Promise.withResolvers<void>() })
    return slot
  }

  release(slot: Reservation): void {
    this.held.get(slot.id)?.resolve()
    this.held.delete(slot.id)
  }

  /** Cancels a session's starts (all, and every later one, on shutdown); resolves once each gave its slot back. */
  async cancel(by: StartCancel, sessionID?: string): Promise<void> {
    if (by === "shutdown") this.shutDown = true
    const starts = [...this.held.values()].filter((h) => sessionID === undefined || h.slot.sessionID === sessionID)
    for (const { slot } of starts) slot.cancelledBy ??= by
    await Promise.all(starts.map((h) => h.promise))
  }

  private checkCap(sessionID: string): void {
    const running = this.deps.running(sessionID)
    const starting = [...this.held.values()].filter((h) => h.slot.sessionID === sessionID).length
    if (running.length + starting < this.deps.cap) return
    const names = running.map((m) => `${m.id} (${m.label})`)
    if (starting > 0) names.push(`${starting} still starting`)
    throw new MonitorError(
      "cap_reached",
      `This session already runs ${running.length + starting} monitors (max_monitors_per_session=${this.deps.cap}). ` +
        `Stop one first with monitor_stop: ${names.join(", ")}.`,
    )
  }

  private freshId(): string {
    for (let tries = 0; tries < 100; tries++) {
      const id = this.deps.newId()
      if (!this.deps.inUse(id) && !this.held.has(id)) return id
    }
    throw new MonitorError("spawn_failed", "Could not find a free monitor id after 100 tries; try again.")
  }
}

/** Why a cancelled start did not happen, as a clause. */
export function cancelReason(by: StartCancel): string {
  return by === "session" ? "its session was deleted" : "the plugin is shutting down (opencode disposed it)"
}

export function cancelledStart(by: StartCancel): MonitorError {
  return new MonitorError("cancelled", `The monitor did not start: ${cancelReason(by)}. Nothing runs.`)
}
