/** Time and timers, injected so time-dependent logic is tested with a fake clock, not sleeps. */
export interface Scheduler {
  now(): number
  setTimeout(callback: () => void, ms: number): TimerHandle
  clearTimeout(handle: TimerHandle): void
}

export type TimerHandle = { readonly id: unknown }

export const realScheduler: Scheduler = {
  now: () => Date.now(),
  setTimeout(callback, ms) {
    const id = setTimeout(callback, ms)
    // Monitors must never keep the host process alive on their own.
    ;(id as { unref?: () => void }).unref?.()
    return { id }
  },
  clearTimeout(handle) {
    clearTimeout(handle.id as ReturnType<typeof setTimeout>)
  },
}

/** What `promise` settles to, or `fallback` if it has not within `ms` on the scheduler's clock. */
export function within<T, F>(scheduler: Scheduler, ms: number, promise: Promise<T>, fallback: F): Promise<T | F> {
  return new Promise((resolve, reject) => {
    const timer = scheduler.setTimeout(() => resolve(fallback), ms)
    promise.then(resolve, reject).finally(() => scheduler.clearTimeout(timer))
  })
}
