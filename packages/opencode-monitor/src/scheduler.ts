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
