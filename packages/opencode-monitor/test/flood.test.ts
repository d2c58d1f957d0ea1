// test-runner: about 8 s (scripts/test.ts deals the unit files into two jobs by it)
import { describe, expect, test } from "bun:test"
import { defaultMonitorConfig } from "../src/config"
import type { MonitorInfo } from "../src/manager"
import { MonitorManager } from "../src/manager"
import type { OutputBatch } from "../src/pipeline/batcher"
import { startMonitor } from "./support/start"

/** Counts batches per monitor without retaining them (a flood makes millions of lines). */
function counter() {
  const batches = new Map<string, number>()
  const ended = new Map<string, (() => void)[]>()
  const endedIds = new Set<string>()
  return {
    onBatch: (b: OutputBatch) => batches.set(b.monitorId, (batches.get(b.monitorId) ?? 0) + 1),
    onEnded: (info: MonitorInfo) => {
      endedIds.add(info.id)
      for (const resolve of ended.get(info.id) ?? []) resolve()
    },
    count: (id: string) => batches.get(id) ?? 0,
    whenEnded: (id: string) =>
      endedIds.has(id)
        ? Promise.resolve()
        : new Promise<void>((resolve) => ended.set(id, [...(ended.get(id) ?? []), resolve])),
  }
}

// These tests order events; they assert no durations. A flood is read within the plugin's share of
// a core (output_cpu_share), so the loop gets its turns; these check it gets them within the read too.
describe("the server's event loop during a flood", () => {
  test("a timer scheduled during a flood runs before the flood ends", async () => {
    const collector = counter()
    const manager = new MonitorManager(defaultMonitorConfig(), {
      onBatch: collector.onBatch,
      onEnded: collector.onEnded,
    })
    const info = await startMonitor(manager, {
      sessionID: "s",
      directory: process.cwd(),
      command: "yes | head -c 10000000",
    })
    // Wait until the flood is under way: the first batch exists.
    while (collector.count(info.id) === 0) await new Promise((r) => setImmediate(r))
    const events: string[] = []
    setTimeout(() => events.push("timer"), 0)
    collector.whenEnded(info.id).then(() => events.push("flood ended"))
    await collector.whenEnded(info.id)
    expect(events).toEqual(["timer", "flood ended"])
    expect(info.counters.total).toBe(5_000_000)
  }, 60_000)

  test("the batch interval timer fires while another monitor floods", async () => {
    const collector = counter()
    const manager = new MonitorManager(
      { ...defaultMonitorConfig(), flush_interval_ms: 250 },
      { onBatch: collector.onBatch, onEnded: collector.onEnded },
    )
    const flood = await startMonitor(manager, {
      sessionID: "s",
      directory: process.cwd(),
      command: "yes | head -c 10000000",
    })
    // One line, then silence: only the interval timer can flush it.
    const quiet = await startMonitor(manager, {
      sessionID: "s",
      directory: process.cwd(),
      command: "echo tick; sleep 30",
    })
    let quietFlushedDuringFlood = false
    collector.whenEnded(flood.id).then(() => {
      quietFlushedDuringFlood = collector.count(quiet.id) > 0
    })
    await collector.whenEnded(flood.id)
    expect(quietFlushedDuringFlood).toBe(true)
    await manager.shutdown()
  }, 60_000)
})
