/**
 * Counts the work done between turns of the event loop: `step()` where a pass reads one thing,
 * `yieldToLoop` as the pass's turn of the loop (it ends a stretch). `all()` lists every stretch,
 * the last, unended one included.
 */
export function stretchCounter() {
  const ended: number[] = []
  let current = 0
  return {
    step(): void {
      current += 1
    },
    async yieldToLoop(): Promise<void> {
      ended.push(current)
      current = 0
      await new Promise((resolve) => setImmediate(resolve))
    },
    all: (): number[] => [...ended, current],
  }
}
