import type { ProcessEntry, ProcessTable, TableView } from "./process-table"
import { isLive, runsAs, sharedWhileRunning } from "./process-table"

/**
 * Every child of a tracked process is tracked, so one that calls setsid or setpgrp (or a double fork's
 * grandchild seen before its parent exits) stays known by pid and start after it left the group (`onEscape`).
 */
export class DescendantTracker {
  /** Each tracked process as last read, and when it was added (performance.now()): an older scan does not drop it. */
  private readonly tracked = new Map<number, { entry: ProcessEntry; addedAt: number }>()
  private readonly escaped = new Set<number>()

  /** `first`: the leader's entry as read when it started (undefined: it was gone already). */
  constructor(
    private readonly leader: number,
    private readonly onEscape: (entry: ProcessEntry) => void,
    private readonly table: ProcessTable,
    first: ProcessEntry | undefined,
  ) {
    if (first) this.note(first)
  }

  /** /proc only: re-reads the tracked processes and adds their new children, O(tracked). With ps, `update` does it. */
  refresh(): void {
    if (this.table.cheap) this.walk(this.table.cheap)
  }

  /** Up to date by the cheapest means the table has: a read of the tracked (/proc) or one shared scan (ps). */
  async update(): Promise<void> {
    if (this.table.cheap) return this.walk(this.table.cheap)
    const startedAt = performance.now()
    this.walk(scanView(await this.table.scan()), startedAt)
  }

  /** Keeps running tracked processes, adds live children; drops reused pids, and gone ones added before `startedAt`. */
  private walk(view: TableView, startedAt = Number.POSITIVE_INFINITY): void {
    let round = [...this.tracked.keys()]
    while (round.length > 0) {
      const next: number[] = []
      const entries = new Map(view.read(round).map((entry) => [entry.pid, entry]))
      for (const pid of round) {
        const entry = entries.get(pid)
        if (entry === undefined && (this.tracked.get(pid)?.addedAt ?? 0) >= startedAt) continue
        if (!this.verify(pid, entry)) continue
        for (const child of view.childrenOf(pid)) if (!this.tracked.has(child)) next.push(child)
      }
      // New children are read (and so proven live) in the next round before they count.
      round = next
    }
  }

  /** Adds, from one shared scan of the whole table, the members of the command's session or group not yet tracked. */
  async adopt(): Promise<void> {
    const startedAt = performance.now()
    const snapshot = await this.table.scan()
    for (const entry of snapshot) {
      if (!isLive(entry) || this.tracked.has(entry.pid)) continue
      if (entry.sid === this.leader || entry.pgrp === this.leader) this.note(entry)
    }
    if (this.table.cheap) this.walk(this.table.cheap)
    else this.walk(scanView(snapshot), startedAt)
  }

  /** Tracks these processes from now on (found by other means, e.g. holding the output pipes). */
  async track(pids: number[]): Promise<void> {
    if (pids.length === 0) return
    // With ps one shared scan answers every caller of the moment, where each read would run ps.
    const entries = this.table.cheap ? this.table.cheap.read(pids) : await this.table.scan()
    for (const entry of entries) if (pids.includes(entry.pid) && isLive(entry)) this.note(entry)
  }

  /** Tracked processes still running (pid not reused), as last refreshed. */
  live(): ProcessEntry[] {
    return [...this.tracked.values()].map(({ entry }) => entry)
  }

  /** Keeps `pid` when `entry` shows it running with the start time it was tracked with. */
  private verify(pid: number, entry: ProcessEntry | undefined): entry is ProcessEntry {
    if (!runsAs(entry, this.tracked.get(pid)?.entry.start)) {
      this.tracked.delete(pid)
      return false
    }
    this.note(entry)
    return true
  }

  private note(entry: ProcessEntry): void {
    this.tracked.set(entry.pid, { entry, addedAt: this.tracked.get(entry.pid)?.addedAt ?? performance.now() })
    if (entry.pgrp !== this.leader && !this.escaped.has(entry.pid)) {
      this.escaped.add(entry.pid)
      this.onEscape(entry)
    }
  }
}

/** One scan of the whole table read as a view: its entries, and the children its parent pids give. */
function scanView(snapshot: readonly ProcessEntry[]): TableView {
  const byPid = new Map(snapshot.map((entry) => [entry.pid, entry]))
  const children = new Map<number, number[]>()
  for (const { ppid, pid } of snapshot) children.get(ppid)?.push(pid) ?? children.set(ppid, [pid])
  return { read: (pids) => pids.flatMap((pid) => byPid.get(pid) ?? []), childrenOf: (pid) => children.get(pid) ?? [] }
}

// One server-wide timer refreshes every attached tracker; with `ps`, one scan per table serves all.
const TRACK_INTERVAL_MS = 200
const active = new Set<DescendantTracker>()
let ticker: ReturnType<typeof setInterval> | undefined
const tick = sharedWhileRunning(() => Promise.all([...active].map((tracker) => tracker.update())))

export function attach(tracker: DescendantTracker): void {
  active.add(tracker)
  if (ticker === undefined) {
    // A table that cannot be read now keeps the last view; a stop reads it again and reports the failure.
    ticker = setInterval(() => tick().catch(() => {}), TRACK_INTERVAL_MS)
    ticker.unref?.()
  }
}

export function detach(tracker: DescendantTracker): void {
  active.delete(tracker)
  if (active.size === 0 && ticker !== undefined) {
    clearInterval(ticker)
    ticker = undefined
  }
}
