import type { MonitorStatus } from "../../src/codec"
import { defaultMonitorConfig } from "../../src/config"
import { ContextLedger } from "../../src/delivery/context-ledger"
import { type InjectorOptions, MonitorOutputInjector } from "../../src/delivery/injector"
import type { OutputBatch } from "../../src/pipeline/batcher"
import { FakeScheduler } from "./fake-scheduler"
import { FakeSessionApi, settle } from "./fake-session-api"
import { batchOf, sizedLine } from "./lines"

/**
 * A MonitorOutputInjector on a fake clock and a fake opencode, with the plugin's default options.
 * `serverClockOffsetMs`: how far the fake opencode's clock (its message times) runs ahead of the
 * plugin's (negative: behind).
 */
export function setupInjector(options: Partial<InjectorOptions> = {}, ledger?: ContextLedger, serverClockOffsetMs = 0) {
  const scheduler = new FakeScheduler()
  const api = new FakeSessionApi(() => scheduler.now() + serverClockOffsetMs)
  scheduler.advance(1_000_000) // message times far from zero
  const gaveUp: string[] = []
  const injector = new MonitorOutputInjector(
    // No active-dispatch ceiling and no stale turns unless a test asks for them.
    { ...defaultMonitorConfig(), max_active_defer_ms: 0, staleTurnsBefore: Number.NEGATIVE_INFINITY, ...options },
    { api, scheduler, onGiveUp: (d) => gaveUp.push(d.key), ledger: ledger ?? new ContextLedger() },
  )
  api.onCreated = (sessionID, key, created) => injector.onOwnMessage(sessionID, key, created)
  const advance = async (ms: number) => {
    // Step in small slices so async sends settle between timer firings, as on a real loop.
    for (let t = 0; t < ms; t += 50) {
      scheduler.advance(Math.min(50, ms - t))
      await settle()
    }
  }
  return { scheduler, api, injector, advance, gaveUp }
}

/**
 * Batch `seq` of a monitor: `lines` lines (`line <seq>.<i>`, seq numbers from seq*100); the
 * indexes in `wakeAt` matched wake_pattern (`FAIL <seq>.<i>`). Running unless `terminal` is given.
 */
export function testBatch(
  seq: number,
  opts: { terminal?: MonitorStatus; lines?: number; wakeAt?: number[]; monitorId?: string } = {},
): OutputBatch {
  const lines = Array.from({ length: opts.lines ?? 1 }, (_, i) => {
    const wake = opts.wakeAt?.includes(i) ?? false
    return sizedLine(seq * 100 + i, "stdout", wake ? `FAIL ${seq}.${i}` : `line ${seq}.${i}`, { wake })
  })
  return batchOf({
    monitorId: opts.monitorId ?? "mon_1",
    batchSeq: seq,
    lines,
    stillRunning: !opts.terminal,
    status: opts.terminal ?? { kind: "running" },
    dropped: { matched: 0, unmatched: 0, bytes: 0 },
  })
}
