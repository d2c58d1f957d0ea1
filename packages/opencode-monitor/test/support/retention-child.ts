// Fresh-process memory measurement of the server-wide retention budget.
// Usage: bun retention-child.ts <sessions> <monitorsPerSession> <ringLines> <retainedMaxBytes> [retainedMaxMonitors]
// Each monitor prints one full ring of 8 KB lines and exits; no session is ever deleted.
// Prints one line `RETENTION_RESULT {json}`.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { defaultMonitorConfig } from "../../src/config"
import { MonitorManager } from "../../src/manager"
import { startMonitor } from "./start"

const [sessions, perSession, ringLines, retainedMaxBytes, retainedMaxMonitors = 100] = process.argv
  .slice(2)
  .map(Number) as [number, number, number, number, number?]
const config = {
  ...defaultMonitorConfig(),
  kill_grace_ms: 300,
  ring_max_lines: ringLines,
  line_max_bytes: 8_192,
  retained_max_bytes: retainedMaxBytes,
  retained_max_monitors: retainedMaxMonitors,
}
const ended = new Set<string>()
let onEnd = () => {}
const manager = new MonitorManager(config, {
  onBatch: () => {},
  onEnded: (m) => {
    ended.add(m.id)
    onEnd()
  },
})
/** Resolves once every monitor of `ids` has ended. */
const allEnded = async (ids: string[]) => {
  while (!ids.every((id) => ended.has(id))) await new Promise<void>((resolve) => (onEnd = resolve))
}
// One full ring of 8,191-byte lines (plus the newline: 8 KB each), written once: each monitor is
// then one `cat` (the shell execs it), not a pipeline of five processes.
const ringFile = join(mkdtempSync(join(tmpdir(), "omo-retention-")), "ring.txt")
writeFileSync(ringFile, `${"x".repeat(8_191)}\n`.repeat(ringLines))
const command = `cat ${ringFile}`
const rss = () => {
  Bun.gc(true)
  return process.memoryUsage().rss
}

const warm = await startMonitor(manager, { sessionID: "warm", directory: process.cwd(), command: "echo warm" })
await allEnded([warm.id])
const baseline = rss()
let peakRetainedBytes = 0
let peakRetainedCount = 0
const started = Date.now()
for (let round = 0; round < perSession; round++) {
  // One monitor per session at a time, ten sessions in parallel.
  for (let s = 0; s < sessions; s += 10) {
    const ids: string[] = []
    for (let k = s; k < Math.min(sessions, s + 10); k++) {
      ids.push((await startMonitor(manager, { sessionID: `ses_${k}`, directory: process.cwd(), command })).id)
    }
    await allEnded(ids)
    peakRetainedBytes = Math.max(peakRetainedBytes, manager.retained.bytes)
    peakRetainedCount = Math.max(peakRetainedCount, manager.retained.count)
  }
}
// Let the allocator's scavenger hand freed pages back before the sample.
rss()
await Bun.sleep(1_000)
const after = rss()
const readable = Array.from({ length: sessions }, (_, k) => manager.list(`ses_${k}`, true).length).reduce(
  (a, b) => a + b,
  0,
)
console.log(
  `RETENTION_RESULT ${JSON.stringify({
    sessions,
    perSession,
    ringLines,
    retainedMaxBytes,
    baselineRss: baseline,
    afterRss: after,
    growthBytes: after - baseline,
    retained: manager.retained,
    readable,
    peakRetainedBytes,
    peakRetainedCount,
    printedBytes: sessions * perSession * ringLines * 8_192,
    ms: Date.now() - started,
  })}`,
)
await manager.shutdown()
rmSync(dirname(ringFile), { recursive: true, force: true })
process.exit(0)
