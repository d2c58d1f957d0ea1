import { renameSync, symlinkSync } from "node:fs"

/**
 * The longest the event loop was held while `work` ran: the longest gap between two firings of a
 * 1 ms timer (the bench's stall meter, finer), counting the stretch up to the end. A synchronous
 * pass shows as one gap as long as itself.
 */
export async function longestStall(work: () => unknown): Promise<number> {
  let last = performance.now()
  let longest = 0
  const timer = setInterval(() => {
    const now = performance.now()
    longest = Math.max(longest, now - last)
    last = now
  }, 1)
  try {
    await work()
  } finally {
    clearInterval(timer)
  }
  return Math.max(longest, performance.now() - last)
}

/** What a racing process does: the real folder at `path` moved aside, a symlink to `target` in its place. */
export function swapForSymlink(path: string, target: string): void {
  renameSync(path, `${path}.aside`)
  symlinkSync(target, path)
}
