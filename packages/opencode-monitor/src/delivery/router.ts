import { noteOf } from "../codec"
import type { MonitorConfig } from "../config"
import { namedLogger } from "../log"
import { isTerminalBatch, type OutputBatch } from "../pipeline/batcher"
import type { Scheduler } from "../scheduler"
import { type BatchOrigin, isRealUserTurn, ObservationBudget } from "./budget"
import { ContextLedger } from "./context-ledger"
import { WAKE_GIVE_UP_MS } from "./delivery-policy"
import type { Identity } from "./gates"
import { MonitorOutputInjector } from "./injector"
import type { SessionApi } from "./session-api"
import { routeBatch, type SessionSource, SessionSources } from "./session-source"

/**
 * Where every batch goes: routed by its session's source, through the observation budget, into the
 * injector (manager → router → budget → injector, nothing calling back up).
 */
export class DeliveryRouter {
  readonly sources: SessionSources
  readonly budget: ObservationBudget
  readonly injector: MonitorOutputInjector

  constructor(
    private readonly config: MonitorConfig,
    private readonly deps: { api: SessionApi; scheduler: Scheduler },
  ) {
    const { api, scheduler } = deps
    const ledger = new ContextLedger()
    this.sources = new SessionSources(api, config.automation_agents, { scheduler, delayMs: config.pending_retry_ms })
    this.injector = new MonitorOutputInjector(
      {
        ...config,
        // No turn of this server started before its plugin loaded: older unfinished ones are a crash's.
        staleTurnsBefore: scheduler.now(),
      },
      {
        api,
        scheduler,
        ledger,
        onGiveUp: (delivery) =>
          api.toast(
            "error",
            "opencode-monitor: wake not delivered",
            `${delivery.label} (${delivery.batch.monitorId}) ${isTerminalBatch(delivery.batch) ? "ended" : delivery.batch.silence ? "went silent" : "printed a wake_pattern line"}, but session ${delivery.sessionID} could not be told for ${WAKE_GIVE_UP_MS / 60_000} minutes: ${delivery.lastError ?? "unknown error"}. Ask the agent to run monitor_list.`,
          ),
      },
    )
    this.budget = new ObservationBudget(config, {
      scheduler,
      ledger,
      forward: (batch, route, label, wakeLimit) => this.injector.enqueue(batch, route, label, wakeLimit),
    })
  }

  route(batch: OutputBatch, origin: BatchOrigin): void {
    const known = this.sources.cached(origin.sessionID)
    // Only the exit notice waits for a classification that failed at start.
    if (known || !isTerminalBatch(batch)) {
      this.deliver(batch, origin, known ?? { kind: "primary" })
      return
    }
    this.sources
      .sourceOf(origin.sessionID)
      .then((source) => this.deliver(batch, origin, source))
      .catch((error) => {
        const fields = { monitorId: batch.monitorId, error: String(error) }
        namedLogger(this.deps.api, "router").error("routing a monitor's exit notice failed", fields)
      })
  }

  private deliver(batch: OutputBatch, origin: BatchOrigin, source: SessionSource): void {
    const matchWakeLeft = this.injector.matchWakeLeft(batch.monitorId, origin.wakeLimit)
    for (const route of routeBatch(source, origin.sessionID, batch, this.config.subagent_wake))
      this.budget.admit(batch, route, { ...origin, matchWakeLeft })
  }

  /** The monitor's exit notice still waits in a delivery queue (its own session's, or its root's). */
  exitNoticeOwed({ id, sessionID }: { id: string; sessionID: string }): boolean {
    const source = this.sources.cached(sessionID)
    const targets = source?.kind === "subagent" ? [sessionID, source.rootID] : [sessionID]
    return targets.some((target) =>
      this.injector.pending(target).some((d) => d.batch.monitorId === id && isTerminalBatch(d.batch)),
    )
  }

  /**
   * `chat.message`: a person's message resets the session's budget, holds deliveries back and gives
   * the agent and model for every wake. Injected (synthetic) prompts, ours included, do none of that.
   * Returns the message's creation time: a person's is moved after a prompt of ours created meanwhile.
   */
  async onChatMessage(
    message: { sessionID: string; created: number },
    parts: readonly { type: string; synthetic?: boolean; metadata?: unknown }[],
    identity: Identity,
  ): Promise<number> {
    const { sessionID, created } = message
    const real = isRealUserTurn(parts)
    // A message with no text part is the person's too.
    if (real || !parts.some((p) => p.type === "text")) this.injector.identities.remember(sessionID, identity)
    if (real) {
      this.budget.onUserTurn(sessionID)
      return this.injector.onPersonMessage(sessionID, created)
    }
    const ours = parts.map((p) => noteOf(p.metadata)).find((note) => note !== undefined)
    if (ours) this.injector.onOwnMessage(sessionID, ours.key, created)
    return created
  }

  /** The agent stopped the monitor: nothing more of it is delivered, and nobody is woken. */
  forgetMonitor(monitorId: string): void {
    this.budget.forgetMonitor(monitorId)
    this.injector.forgetMonitor(monitorId)
  }

  forgetSession(sessionID: string): void {
    this.injector.forgetSession(sessionID)
    this.budget.forgetSession(sessionID)
    this.sources.forget(sessionID)
  }

  dispose(): void {
    this.budget.dispose()
    this.injector.dispose()
  }
}
