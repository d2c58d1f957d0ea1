import { addDrops, isTerminalBatch, type OutputBatch } from "../pipeline/batcher"
import { lineByteLength } from "../pipeline/line"
import type { Delivery } from "./session-queue"

export type CoalesceBounds = { maxLines: number; maxBytes: number }

/**
 * Keeps a monitor's waiting output within the bound: the oldest batches give way, counted in the
 * next one's `dropped:`. Never a terminal batch, nor one already attempted (it may have landed).
 */
export function coalesceWaiting(deliveries: Delivery[], monitorId: string, bounds: CoalesceBounds): Delivery[] {
  const waiting = deliveries.filter((d) => d.batch.monitorId === monitorId && !isTerminalBatch(d.batch))
  let lines = 0
  let bytes = 0
  for (const d of waiting) {
    lines += d.batch.lines.length
    bytes += d.batch.bytes
  }
  const dropped = new Set<Delivery>()
  for (let i = 0; i < waiting.length - 1; i++) {
    if (lines <= bounds.maxLines && bytes <= bounds.maxBytes) break
    const oldest = waiting[i] as Delivery
    if (oldest.attempts > 0) continue
    const next = waiting[i + 1] as Delivery
    next.dropped = addDrops(next.dropped, oldest.dropped, {
      matched: oldest.batch.lines.length,
      unmatched: 0,
      bytes: rawBytes(oldest.batch),
    })
    lines -= oldest.batch.lines.length
    bytes -= oldest.batch.bytes
    dropped.add(oldest)
  }
  return dropped.size === 0 ? deliveries : deliveries.filter((d) => !dropped.has(d))
}

/** The output bytes of a batch's lines, as `dropped:` counts them. */
function rawBytes(batch: OutputBatch): number {
  let bytes = 0
  for (const line of batch.lines) bytes += lineByteLength(line)
  return bytes
}
