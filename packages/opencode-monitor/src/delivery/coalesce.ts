import { addDrops, isTerminalBatch } from "../pipeline/batcher"
import { lineByteLength } from "../pipeline/line"
import type { Delivery } from "./session-queue"

/** How much output may wait in one place: lines, and bytes as the envelope counts its rows. */
export type Bounds = { maxLines: number; maxBytes: number }

/**
 * Keeps a monitor's waiting output within the bound: the oldest batches give way, counted in the next one's
 * `dropped:`. Never a terminal batch, nor one already attempted (it may have landed).
 */
export function coalesceWaiting(deliveries: Delivery[], monitorId: string, bounds: Bounds): Delivery[] {
  const waiting = deliveries.filter((d) => d.batch.monitorId === monitorId && !isTerminalBatch(d.batch))
  let lines = waiting.reduce((sum, d) => sum + d.batch.lines.length, 0)
  let bytes = waiting.reduce((sum, d) => sum + d.batch.bytes, 0)
  const dropped = new Set<Delivery>()
  for (let i = 0; i < waiting.length - 1 && (lines > bounds.maxLines || bytes > bounds.maxBytes); i++) {
    const oldest = waiting[i] as Delivery
    if (oldest.attempts > 0) continue
    const next = waiting[i + 1] as Delivery
    // `dropped:` counts output bytes, not envelope bytes.
    const outputBytes = oldest.batch.lines.reduce((sum, line) => sum + lineByteLength(line), 0)
    const gaveWay = { matched: oldest.batch.lines.length, unmatched: 0, bytes: outputBytes }
    next.dropped = addDrops(next.dropped, oldest.dropped, gaveWay)
    lines -= oldest.batch.lines.length
    bytes -= oldest.batch.bytes
    dropped.add(oldest)
  }
  return dropped.size === 0 ? deliveries : deliveries.filter((d) => !dropped.has(d))
}
