/**
 * Bytes put into each session's context since its last real user turn, charged by the budget (observations) and
 * the injector (wakes, as sent), so neither calls the other. Deleted when a person writes or the session is gone.
 */
export class ContextLedger extends Map<string, number> {
  spent(sessionID: string): number {
    return this.get(sessionID) ?? 0
  }

  charge(sessionID: string, bytes: number): void {
    this.set(sessionID, this.spent(sessionID) + bytes)
  }
}
