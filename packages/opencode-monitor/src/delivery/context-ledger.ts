/**
 * Bytes put into each session's context since its last real user turn, shared by the budget (what it
 * forwards) and the injector (the match wakes it sends, as sent), so neither calls the other.
 */
export class ContextLedger {
  private readonly spentBySession = new Map<string, number>()

  spent(sessionID: string): number {
    return this.spentBySession.get(sessionID) ?? 0
  }

  charge(sessionID: string, bytes: number): void {
    this.spentBySession.set(sessionID, this.spent(sessionID) + bytes)
  }

  /** A person wrote, or the session is gone: its count starts afresh. */
  reset(sessionID: string): void {
    this.spentBySession.delete(sessionID)
  }

  clear(): void {
    this.spentBySession.clear()
  }
}
