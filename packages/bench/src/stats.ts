/** Small statistics helpers: every reported figure is a median over repeated runs. */

export function sorted(values: readonly number[]): number[] {
  return [...values].sort((a, b) => a - b)
}

/** Nearest-rank percentile (p in 0..100) of a non-empty sample. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN
  const s = sorted(values)
  const rank = Math.ceil((p / 100) * s.length)
  return s[Math.min(s.length - 1, Math.max(0, rank - 1))] as number
}

/** Median; the mean of the two middle values for an even count. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN
  const s = sorted(values)
  const mid = s.length >> 1
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2
}

export const p95 = (values: readonly number[]): number => percentile(values, 95)

export function max(values: readonly number[]): number {
  return values.reduce((a, b) => Math.max(a, b), Number.NEGATIVE_INFINITY)
}

/** A repeated measurement: every run, and the median that gets reported. */
export type Sample = { runs: number[]; median: number; p95: number; min: number; max: number }

export function sample(runs: readonly number[]): Sample {
  return { runs: [...runs], median: median(runs), p95: p95(runs), min: Math.min(...runs), max: max(runs) }
}

export const MB = 1024 * 1024

export function formatBytesPerSecond(bytesPerSecond: number): string {
  if (!Number.isFinite(bytesPerSecond)) return "n/a"
  if (bytesPerSecond >= 1024 * MB) return `${(bytesPerSecond / (1024 * MB)).toFixed(2)} GB/s`
  return `${(bytesPerSecond / MB).toFixed(1)} MB/s`
}

export function formatCount(perSecond: number): string {
  if (!Number.isFinite(perSecond)) return "n/a"
  if (perSecond >= 1e6) return `${(perSecond / 1e6).toFixed(2)} M`
  if (perSecond >= 1e3) return `${(perSecond / 1e3).toFixed(1)} k`
  return perSecond.toFixed(0)
}

export function formatRatio(ratio: number): string {
  if (!Number.isFinite(ratio)) return "n/a"
  if (ratio >= 100) return `${ratio.toFixed(0)}×`
  if (ratio >= 10) return `${ratio.toFixed(1)}×`
  return `${ratio.toFixed(2)}×`
}

export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return "n/a"
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`
  if (ms >= 10) return `${ms.toFixed(0)} ms`
  if (ms >= 0.1) return `${ms.toFixed(2)} ms`
  return `${(ms * 1000).toFixed(1)} µs`
}
