/** Each session's bytes since its last real user turn, charged by budget and injector (so neither calls the other). */
export class ContextLedger extends Map<string, number> {
  spent(sessionID: string): number {
    return this.get(sessionID) ?? 0
  }

  charge(sessionID: string, bytes: number): void {
    this.set(sessionID, this.spent(sessionID) + bytes)
  }
}
