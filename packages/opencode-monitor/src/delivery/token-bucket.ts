/** A bucket of bytes: holds at most `capacity`, refills at `perMinute`. */
export class TokenBucket {
  private tokens: number

  constructor(
    private readonly capacity: number,
    private readonly perMinute: number,
    private refilledAt: number,
  ) {
    this.tokens = capacity
  }

  /** Bytes that may go at `now`. */
  room(now: number): number {
    this.tokens = Math.min(this.capacity, this.tokens + ((now - this.refilledAt) * this.perMinute) / 60_000)
    this.refilledAt = now
    return this.tokens
  }

  take(bytes: number): void {
    this.tokens -= bytes
  }

  /** Full again (a person wrote in the session). */
  fill(now: number): void {
    this.tokens = this.capacity
    this.refilledAt = now
  }

  /** When `need` bytes will be there (Infinity when it never refills). */
  roomAt(need: number, now: number): number {
    const missing = need - this.room(now)
    if (missing <= 0) return now
    return this.perMinute > 0 ? now + (missing * 60_000) / this.perMinute : Number.POSITIVE_INFINITY
  }
}
