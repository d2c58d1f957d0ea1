/**
 * Bytes put into each session's context since its last real user turn: the observation
 * budget charges what it forwards and reads what is left; the injector charges the match wakes it
 * sends, with their exact text, since only it knows what a wake assembled from several batches
 * became. One instance per plugin, shared by the two, so neither calls the other.
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
