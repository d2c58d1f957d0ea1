import type { FakeScheduler } from "./fake-scheduler"
import { settle } from "./fake-session-api"

/**
 * Runs the fake clock, `stepMs` a step, while real work goes on (a process printing, exiting):
 * until `work` settles or `until()` holds, at most `maxSteps` steps. Only for waiting on real
 * processes; what a test asserts about time is decided on the fake clock alone.
 */
export async function drive<T>(
  scheduler: FakeScheduler,
  work: Promise<T> | undefined,
  options: { until?: () => boolean; stepMs?: number; maxSteps?: number } = {},
): Promise<void> {
  let done = false
  work?.then(
    () => (done = true),
    () => (done = true),
  )
  for (let step = 0; step < (options.maxSteps ?? 500); step++) {
    await settle()
    if (work ? done : options.until?.()) return
    if (options.until?.()) return
    scheduler.advance(options.stepMs ?? 100)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}
