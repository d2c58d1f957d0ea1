/** The harness's waits, without opencode (fast): a look that asks a server waits for a sign of change. */
import { expect, test } from "bun:test"
import { serverActivity, sleep, waitFor } from "../src/wait.ts"

test("an asking look goes again on server activity, not every poll interval", async () => {
  let looks = 0
  let ready = false
  const waiting = waitFor(
    async () => {
      looks++
      return ready
    },
    5_000,
    20,
    "ready",
  )
  await sleep(300)
  // With no activity a 20 ms poll would have looked ~15 times; the quiet wait looks once or twice.
  expect(looks).toBeLessThanOrEqual(2)
  ready = true
  const before = Date.now()
  serverActivity()
  expect(await waiting).toBe(true)
  expect(Date.now() - before).toBeLessThan(200)
})

test("a local look (no promise) still polls at its interval", async () => {
  let looks = 0
  await waitFor(() => ++looks >= 5, 2_000, 20, "five looks")
  expect(looks).toBe(5)
})

test("looks stay at least the poll interval apart under a burst of activity", async () => {
  let looks = 0
  const started = Date.now()
  const burst = setInterval(serverActivity, 1)
  await waitFor(async () => ++looks >= 4, 5_000, 100, "four looks").finally(() => clearInterval(burst))
  expect(looks).toBe(4)
  expect(Date.now() - started).toBeGreaterThanOrEqual(290)
})
