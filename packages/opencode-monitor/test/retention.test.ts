// test-runner: about 24 s (scripts/test.ts deals the unit files into two jobs by it)
import { describe, expect, test } from "bun:test"
import { spawnSync } from "node:child_process"
import { join } from "node:path"
import { ExitedRetention } from "../src/retention"
import { FakeScheduler } from "./support/fake-scheduler"

type Limits = { retained_max_bytes: number; retained_max_monitors: number; retained_max_age_ms: number }

function retention(limits: Partial<Limits> = {}) {
  const scheduler = new FakeScheduler()
  const evicted: string[] = []
  const all = { retained_max_bytes: 1_000, retained_max_monitors: 3, retained_max_age_ms: 60_000, ...limits }
  const r = new ExitedRetention(all, scheduler, (id) => evicted.push(id))
  return { r, scheduler, evicted }
}

describe("server-wide retention of exited monitors", () => {
  test("keeps at most retained_max_monitors, the oldest-ended leave first", () => {
    const { r, evicted } = retention()
    for (const id of ["a", "b", "c", "d", "e"]) r.admit(id, 10)
    expect(evicted).toEqual(["a", "b"])
    expect(r.totals).toEqual({ count: 3, bytes: 30 })
  })

  test("keeps at most retained_max_bytes of estimated output", () => {
    const { r, evicted } = retention({ retained_max_monitors: 100 })
    r.admit("a", 400)
    r.admit("b", 400)
    r.admit("c", 400)
    expect(evicted).toEqual(["a"])
    expect(r.totals).toEqual({ count: 2, bytes: 800 })
  })

  test("forgets a monitor retained_max_age_ms after it ended, without any other activity", () => {
    const { r, scheduler, evicted } = retention()
    r.admit("a", 10)
    scheduler.advance(30_000)
    r.admit("b", 10)
    scheduler.advance(29_999)
    expect(evicted).toEqual([])
    scheduler.advance(1)
    expect(evicted).toEqual(["a"])
    scheduler.advance(30_000)
    expect(evicted).toEqual(["a", "b"])
    expect(r.totals).toEqual({ count: 0, bytes: 0 })
    expect(scheduler.pendingTimers).toBe(0)
  })

  test("a monitor forgotten with its session no longer counts", () => {
    const { r, evicted } = retention()
    r.admit("a", 600)
    r.forget("a")
    r.admit("b", 600)
    expect(evicted).toEqual([])
    expect(r.totals).toEqual({ count: 1, bytes: 600 })
  })

  test(
    "50 sessions x 10 monitors each printing a full ring of 8 KB lines stay within the stated bound (RSS after GC, fresh process)",
    () => {
      const retainedMaxBytes = 16 * 1024 * 1024
      const ringLines = 100
      const child = spawnSync(
        process.execPath,
        [join(import.meta.dir, "support/retention-child.ts"), "50", "10", String(ringLines), String(retainedMaxBytes)],
        { encoding: "utf8", timeout: 240_000 },
      )
      const line = child.stdout.split("\n").find((l) => l.startsWith("RETENTION_RESULT "))
      expect(line, child.stderr).toBeDefined()
      const result = JSON.parse((line as string).slice("RETENTION_RESULT ".length))
      // Sessions are never deleted, yet what stays readable is bounded server-wide.
      expect(result.retained.bytes).toBeLessThanOrEqual(retainedMaxBytes)
      expect(result.peakRetainedBytes).toBeLessThanOrEqual(retainedMaxBytes)
      expect(result.readable).toBe(result.retained.count)
      // The bound docs/security.md states: retained_max_bytes for all exited monitors, plus per running monitor its
      // ring twice (raw bytes and decoded text; ten ran at once here), plus the runtime's slack.
      const ringBytes = ringLines * 8_192
      const bound = retainedMaxBytes + 10 * 2 * ringBytes + 32 * 1024 * 1024
      expect(result.growthBytes).toBeLessThanOrEqual(bound)
    },
    { timeout: 240_000 },
  )
})
