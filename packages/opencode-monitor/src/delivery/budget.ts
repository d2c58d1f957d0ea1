import {
  addDrops,
  type BudgetNote,
  type DropCounts,
  isTerminalBatch,
  NO_DROPS,
  type OutputBatch,
} from "../pipeline/batcher"
import { type BatchLines, fieldsOf, linesOf } from "../pipeline/batch-lines"
import type { MonitorLine } from "../pipeline/line"
import type { Scheduler, TimerHandle } from "../scheduler"
import { RawCaselessWords } from "../pipeline/filter"
import { ContextLedger } from "./context-ledger"
import { formatMonitorBatch } from "./envelope"
import type { Route } from "./session-source"

export type BudgetOptions = {
  /** Refill rate of each monitor's bucket; 0 turns streaming observations off (wakes still come). */
  bytesPerMinute: number
  /** Capacity of each monitor's bucket: what a quiet monitor may send at once. */
  burstBytes: number
  /** Observations into one session between two real user turns, all monitors together. */
  sessionBytes: number
  /**
   * Past a monitor's bucket, at most one summary envelope per monitor this often, only while output
   * flows; past the session's total, one per monitor until a person writes again.
   */
  summaryIntervalMs: number
}

export type BudgetDeps = {
  scheduler: Scheduler
  /** Each session's bytes since its last real user turn, shared with the injector (it charges match wakes). */
  ledger?: ContextLedger
  /** The next stage (the injector's enqueue); `wakeLimit` is the monitor's `wake_limit` (0 = none). */
  forward: (batch: OutputBatch, route: Route, label: string, wakeLimit: number) => void
}

/** The monitor a batch is from, as the budget needs it. */
export type BatchSource = {
  label: string
  /** It has a `match_pattern`: its matching lines are priority lines. */
  hasPattern: boolean
  /** Its `wake_limit` (0 without a `wake_pattern`), passed on to the injector. */
  wakeLimit: number
  /** It may still cause a match wake (`wake_limit` not used up; the router asks the injector). */
  matchWakeLeft: boolean
}

/** Lines with a seq up to this are "the first lines after start" (startup errors live there). */
const STARTUP_LINES = 20
/** The fixed, documented list of words that make a line error-looking (case-insensitive). */
const ERROR_WORDS = ["error", "fail", "panic", "exception", "traceback"] as const
/** Held-back priority lines kept to retry in a later envelope; older ones are only counted. */
const PENDING_PRIORITY_MAX = 20
/**
 * Held lines waiting to be looked at for priority lines, at most. Each is a record of ~40 bytes that
 * pins its read block (a flood's blocks are shared by thousands of lines); a look finds the same
 * lines whenever it comes, so a larger bound only means fewer looks.
 */
const UNSORTED_MAX = 32_768
// Estimate of an envelope's fixed text (header, status, dropped and budget lines) and of one
// line's `[stream seq=N] ` prefix, used to choose lines; what is charged is the real text's size.
const ENVELOPE_OVERHEAD_BYTES = 480
const LINE_PREFIX_BYTES = 24
const ERROR_LOOKING = new RegExp(ERROR_WORDS.join("|"), "i")
const ERROR_WORDS_IN_BYTES = new RawCaselessWords(ERROR_WORDS)

/**
 * True when the line's text contains one of ERROR_WORDS, in any case. Checked on the held lines of a
 * flood past the budget: decided on the raw bytes where they answer as the text does, so most lines
 * are never decoded.
 */
export const isErrorLooking = (line: MonitorLine): boolean =>
  ERROR_WORDS_IN_BYTES.test(line.source, line.blockStart, line.blockStart + line.byteLength) ??
  ERROR_LOOKING.test(line.text)

/** `isErrorLooking` of line `i` of `lines`, made into an object only when its bytes cannot tell. */
const isErrorLookingAt = (lines: BatchLines, i: number): boolean =>
  ERROR_WORDS_IN_BYTES.test(lines.block(i), lines.start(i), lines.end(i)) ?? ERROR_LOOKING.test(lines.line(i).text)

/**
 * Wakes are never held back by the budget: the terminal batch, and a running batch routed to wake
 * (it carries a `wake_pattern` match) while its monitor has match wakes left. Past `wake_limit`
 * such a batch is a plain observation.
 */
const isWakeDelivery = (batch: OutputBatch, route: Route, matchWakeLeft: boolean): boolean =>
  isTerminalBatch(batch) || (route.wake && matchWakeLeft)

/** A person's message, not one of the synthetic prompts this or another plugin injects. */
export function isRealUserTurn(parts: readonly { type: string; synthetic?: boolean }[]): boolean {
  return parts.some((part) => part.type === "text" && part.synthetic !== true)
}

/** What one monitor has sent into one session and what it holds back since its last envelope. */
type Stream = {
  key: string
  sessionID: string
  monitorId: string
  tokens: number
  refilledAt: number
  lastEnvelopeAt: number
  held: { lines: number; bytes: number; firstSeq: number; dropped: DropCounts }
  /** The last batch held, and where its latest line is (made an object only when it is shown). */
  lastHeld: { batch: OutputBatch; lines: BatchLines; at: number } | undefined
  /** The last priority lines held (at most PENDING_PRIORITY_MAX), oldest first, up to `unsorted`. */
  pendingPriority: MonitorLine[]
  /** The lines of the batches held after those, not yet looked at (see `heldPriority`), and how many. */
  unsorted: BatchLines[]
  unsortedLines: number
  /** Sent its one summary that did not fit the session's total: silent until a person writes. */
  summarizedPastBudget: boolean
  /** Where held-back observations go: never a wake route. */
  route: Route
  label: string
  hasPattern: boolean
  wakeLimit: number
  timer: { handle: TimerHandle; at: number } | undefined
}

/**
 * The observation budget (SPEC §14): between the pipeline and the injector, decides how much of a
 * monitor's streaming output reaches a session. Each monitor has a token bucket of bytes (refilled
 * per minute, with a burst), each session a total between two real user turns. When a batch does
 * not fit, its most informative lines go first (startup, error-looking, matching, the latest); the
 * rest is counted in `dropped:` and the envelope says how to read it with `monitor_output`. Past
 * its bucket a monitor gets at most one short summary envelope per interval, and only while it
 * prints. Observations and summaries are charged to the session's total here, match wakes by
 * the injector as sent (the ledger is shared); past that total each monitor gets one summary
 * until a person writes again.
 */
export class ObservationBudget {
  private readonly streams = new Map<string, Stream>()
  /** The stream the last batch went to. */
  private recent: Stream | undefined
  private readonly ledger: ContextLedger

  constructor(
    private readonly options: BudgetOptions,
    private readonly deps: BudgetDeps,
  ) {
    this.ledger = deps.ledger ?? new ContextLedger()
  }

  admit(batch: OutputBatch, routed: Route, source: BatchSource): void {
    const { label, hasPattern, wakeLimit } = source
    // A silence wake is not counted against wake_limit: it may wake whatever matches did.
    const wakeLeft = batch.silence !== undefined || source.matchWakeLeft
    const wake = isWakeDelivery(batch, routed, wakeLeft)
    // A match past wake_limit is an observation; a subagent's root session gets none of it (the
    // child has its own route for those lines).
    if (routed.wake && !wake && routed.subagentSessionID !== undefined) return
    const route = routed.wake && !wake ? { ...routed, wake: false } : routed
    const stream = this.stream(batch.monitorId, route, label, hasPattern, wakeLimit)
    if (wake) {
      // Never held back, and never without a line: when the latest output was held (it may have
      // been flushed just before the exit), the wake shows it. A match wake is charged by the
      // injector when it is sent, as it went out.
      const held = lastHeldLine(stream)
      const lines = held && batch.lines.length === 0 ? [held] : batch.lines
      this.send(stream, this.compose(stream, batch, lines), { charge: false, route })
      if (isTerminalBatch(batch)) this.forgetStream(stream)
    } else if (this.options.bytesPerMinute === 0) {
      this.hold(stream, batch, [])
    } else {
      this.admitObservation(stream, batch)
    }
  }

  /**
   * The whole batch (with held priority lines) when it fits; else the priority lines that fit, with
   * the latest line; else nothing yet, and its priority lines wait for room.
   */
  private admitObservation(stream: Stream, batch: OutputBatch): void {
    const available = this.room(stream)
    const records = linesOf(batch)
    const size = records.bytes + records.length * LINE_PREFIX_BYTES
    // Nothing can be sent: the batch alone does not fit, and not one line would. Its lines are looked
    // at only once room may come (a flood past its bucket is held batch after batch).
    if (available < ENVELOPE_OVERHEAD_BYTES + LINE_PREFIX_BYTES && ENVELOPE_OVERHEAD_BYTES + size > available) {
      this.hold(stream, batch, undefined, records)
      return
    }
    const pending = this.heldPriority(stream)
    if (estimate(pending) + size <= available) {
      const candidates = pending.length > 0 ? [...pending, ...batch.lines] : batch.lines
      this.send(stream, this.compose(stream, batch, candidates), { charge: true })
      return
    }
    // Each new line is looked at once (as bytes; only priority lines become objects); held priority
    // lines were found when they were looked at.
    const fresh: MonitorLine[] = []
    for (let i = 0; i < records.length; i++) if (this.isPriorityAt(stream, records, i)) fresh.push(records.line(i))
    const priority = pending.length > 0 ? [...pending, ...fresh] : fresh
    // No priority line: nothing is chosen, and the latest line need not become an object.
    const latest = records.length > 0 && priority.length > 0 ? records.line(records.length - 1) : undefined
    const chosen = this.choose(priority, latest, available)
    if (chosen) this.send(stream, this.compose(stream, batch, chosen), { charge: true })
    else this.hold(stream, batch, priority, records)
  }

  /** A person wrote in the session: its total, its monitors' buckets and summaries start afresh. */
  onUserTurn(sessionID: string): void {
    this.ledger.reset(sessionID)
    for (const stream of this.streams.values()) {
      if (stream.sessionID !== sessionID) continue
      stream.summarizedPastBudget = false
      stream.tokens = this.options.burstBytes
      stream.refilledAt = this.deps.scheduler.now()
    }
  }

  forgetMonitor(monitorId: string): void {
    for (const stream of this.streams.values()) if (stream.monitorId === monitorId) this.forgetStream(stream)
  }

  forgetSession(sessionID: string): void {
    this.ledger.reset(sessionID)
    for (const stream of this.streams.values()) if (stream.sessionID === sessionID) this.forgetStream(stream)
  }

  dispose(): void {
    for (const stream of this.streams.values()) this.forgetStream(stream)
    this.ledger.clear()
  }

  /** Monitor-and-session pairs with state; a monitor's is deleted when it ends. */
  get streamCount(): number {
    return this.streams.size
  }

  /** Bytes charged to a session since its last real user turn (match wakes included). */
  spent(sessionID: string): number {
    return this.ledger.spent(sessionID)
  }

  private stream(monitorId: string, route: Route, label: string, hasPattern: boolean, wakeLimit: number): Stream {
    // A flood brings batch after batch of one monitor: its stream is found without a key then.
    const recent = this.recent
    if (recent?.monitorId === monitorId && recent.sessionID === route.sessionID)
      return this.refresh(recent, route, label, wakeLimit)
    const key = `${route.sessionID}|${monitorId}`
    let stream = this.streams.get(key)
    if (!stream) {
      const now = this.deps.scheduler.now()
      stream = {
        key,
        sessionID: route.sessionID,
        monitorId,
        tokens: this.options.burstBytes,
        refilledAt: now,
        lastEnvelopeAt: now,
        held: emptyHeld(),
        lastHeld: undefined,
        pendingPriority: [],
        unsorted: [],
        unsortedLines: 0,
        summarizedPastBudget: false,
        route,
        label,
        hasPattern,
        wakeLimit,
        timer: undefined,
      }
      this.streams.set(key, stream)
    }
    this.recent = stream
    return this.refresh(stream, route, label, wakeLimit)
  }

  private refresh(stream: Stream, route: Route, label: string, wakeLimit: number): Stream {
    // A match wake's route is never kept: what the stream sends later is an observation.
    stream.route = route.wake ? { ...route, wake: false } : route
    stream.label = label
    stream.wakeLimit = wakeLimit
    return stream
  }

  /** Bytes this stream may send now: its refilled bucket, within what its session has left. */
  private room(stream: Stream): number {
    const now = this.deps.scheduler.now()
    const gained = ((now - stream.refilledAt) * this.options.bytesPerMinute) / 60_000
    stream.tokens = Math.min(this.options.burstBytes, stream.tokens + gained)
    stream.refilledAt = now
    return Math.min(stream.tokens, this.sessionLeft(stream.sessionID))
  }

  private sessionLeft(sessionID: string): number {
    return this.options.sessionBytes - this.spent(sessionID)
  }

  /**
   * Whether line `i` of `lines` is a priority line (startup, matching, error-looking), without making
   * it an object unless only its text can tell.
   */
  private isPriorityAt(stream: Stream, lines: BatchLines, i: number): boolean {
    return lines.seq(i) <= STARTUP_LINES || (stream.hasPattern && lines.matched(i)) || isErrorLookingAt(lines, i)
  }

  /**
   * Priority lines in order (startup, then error-looking, then matching; oldest first in each),
   * then the latest line, while they fit. Undefined when not one priority line fits.
   */
  private choose(priority: MonitorLine[], latest: MonitorLine | undefined, available: number) {
    if (priority.length === 0 || available < ENVELOPE_OVERHEAD_BYTES + LINE_PREFIX_BYTES) return undefined
    const rank = (line: MonitorLine) => (line.seq <= STARTUP_LINES ? 0 : isErrorLooking(line) ? 1 : 2)
    const ordered = priority
      .map((line) => ({ line, rank: rank(line) }))
      .sort((a, b) => a.rank - b.rank || a.line.seq - b.line.seq)
    const chosen = new Set<MonitorLine>()
    let cost = ENVELOPE_OVERHEAD_BYTES
    for (const line of [...ordered.map((o) => o.line), ...(latest ? [latest] : [])]) {
      const lineCost = line.byteLength + LINE_PREFIX_BYTES
      if (chosen.has(line) || cost + lineCost > available) continue
      if (chosen.size === 0 && line === latest && !priority.includes(line)) return undefined
      chosen.add(line)
      cost += lineCost
    }
    return chosen.size > 0 ? [...chosen].sort((a, b) => a.seq - b.seq) : undefined
  }

  /**
   * The envelope's batch for `shown` (lines of `batch`, or held earlier), counting everything held
   * back since the last envelope in `dropped:`, with a note saying how to read it. Changes nothing.
   */
  private compose(stream: Stream, batch: OutputBatch, shown: MonitorLine[], summary = false): OutputBatch {
    const held = { ...stream.held }
    const records = linesOf(batch)
    const visible = new Set(shown)
    const fresh = new Set<MonitorLine>()
    for (let i = 0; i < records.length; i++) {
      const made = records.made(i)
      if (made && visible.has(made)) fresh.add(made)
    }
    countHeld(held, records, fresh)
    // Shown lines held earlier were counted then.
    for (const line of shown) if (!fresh.has(line)) uncountHeld(held, line)
    // A summary always says so: its line is cut by the envelope even when it is the only one held.
    const budget: BudgetNote | undefined =
      held.lines > 0 || summary
        ? { kind: summary ? "summary" : "held", lines: held.lines, bytes: held.bytes, sinceSequence: held.firstSeq - 1 }
        : undefined
    return {
      ...fieldsOf(batch),
      lines: shown,
      dropped: addDrops(held.dropped, batch.dropped, {
        matched: held.lines,
        unmatched: 0,
        bytes: held.bytes,
      }),
      ...(budget ? { budget } : {}),
    }
  }

  /** The size of the envelope's text, what is charged. */
  private cost(stream: Stream, out: OutputBatch): number {
    return Buffer.byteLength(formatMonitorBatch({ batch: out, label: stream.label }))
  }

  /** Forwards a composed envelope; what it counted as held is reported, so the stream holds nothing now. */
  private send(stream: Stream, out: OutputBatch, how: { charge: boolean; route?: Route }) {
    if (how.charge) {
      const cost = this.cost(stream, out)
      stream.tokens -= cost
      this.ledger.charge(stream.sessionID, cost)
    }
    stream.held = emptyHeld()
    stream.lastHeld = undefined
    stream.pendingPriority = []
    clearUnsorted(stream)
    stream.lastEnvelopeAt = this.deps.scheduler.now()
    this.clearTimer(stream)
    this.deps.forward(out, how.route ?? stream.route, stream.label, stream.wakeLimit)
  }

  /**
   * Holds a whole batch back; its priority lines wait (bounded) for room in a later envelope. With
   * `priority` (every priority line held so far, the batch's included) they are known; without, the
   * batch's lines wait unsorted until `heldPriority` looks at them.
   */
  private hold(
    stream: Stream,
    batch: OutputBatch,
    priority: MonitorLine[] | undefined,
    records: BatchLines = linesOf(batch),
  ): void {
    countHeld(stream.held, records)
    if (batch.dropped !== NO_DROPS) stream.held.dropped = addDrops(stream.held.dropped, batch.dropped)
    if (records.length > 0) stream.lastHeld = { batch, lines: records, at: records.length - 1 }
    else stream.lastHeld = stream.lastHeld ? { ...stream.lastHeld, batch } : { batch, lines: records, at: -1 }
    if (priority) {
      stream.pendingPriority = priority.slice(-PENDING_PRIORITY_MAX)
      clearUnsorted(stream)
    } else {
      stream.unsorted.push(records)
      stream.unsortedLines += records.length
      if (stream.unsortedLines > UNSORTED_MAX) this.heldPriority(stream)
    }
    if (this.options.bytesPerMinute > 0) this.arm(stream)
  }

  /**
   * The last PENDING_PRIORITY_MAX priority lines held, oldest first. Unsorted held lines are looked
   * at newest first, only until that many are found: older ones could never be chosen.
   */
  private heldPriority(stream: Stream): MonitorLine[] {
    const unsorted = stream.unsorted
    if (unsorted.length === 0) return stream.pendingPriority
    const found: MonitorLine[] = []
    for (let b = unsorted.length - 1; b >= 0 && found.length < PENDING_PRIORITY_MAX; b--) {
      const lines = unsorted[b] as BatchLines
      for (let i = lines.length - 1; i >= 0 && found.length < PENDING_PRIORITY_MAX; i--)
        if (this.isPriorityAt(stream, lines, i)) found.push(lines.line(i))
    }
    found.reverse()
    const older = PENDING_PRIORITY_MAX - found.length
    stream.pendingPriority = older > 0 ? [...stream.pendingPriority.slice(-older), ...found] : found
    clearUnsorted(stream)
    return stream.pendingPriority
  }

  /**
   * One timer per holding stream, at the earliest of: the bucket having room for the oldest held
   * priority line (so an error printed just before a silence still arrives), and the summary being
   * due (never again once its summary past the session's total went). Never armed for a silent
   * stream: only holding a batch arms it.
   *
   * Held lines not looked at yet (a flood held batch after batch) could only bring that time down
   * to when the bucket has room for the smallest envelope: until then they wait, and a timer for
   * then looks at them and arms again, so a flood is looked at once per refill, not per batch.
   */
  private arm(stream: Stream): void {
    const now = this.deps.scheduler.now()
    const summaryAt = stream.summarizedPastBudget
      ? Number.POSITIVE_INFINITY
      : stream.lastEnvelopeAt + this.options.summaryIntervalMs
    const unsorted = stream.unsorted.length > 0
    const first = unsorted ? undefined : stream.pendingPriority[0]
    const lineAt = unsorted
      ? this.roomAt(stream, ENVELOPE_OVERHEAD_BYTES + LINE_PREFIX_BYTES)
      : first
        ? this.roomAt(stream, estimate([first]))
        : Number.POSITIVE_INFINITY
    const look = lineAt < summaryAt && unsorted
    let at = Math.min(summaryAt, lineAt)
    if (at === Number.POSITIVE_INFINITY) return
    at = Math.max(now + 1, Math.ceil(at))
    if (stream.timer && stream.timer.at <= at) return
    this.clearTimer(stream)
    const handle = this.deps.scheduler.setTimeout(() => {
      stream.timer = undefined
      if (!look) return this.onTimer(stream)
      this.heldPriority(stream)
      this.arm(stream)
    }, at - now)
    stream.timer = { handle, at }
  }

  /** When the bucket has room for `need` bytes (never, past what the session has left). */
  private roomAt(stream: Stream, need: number): number {
    if (need > this.sessionLeft(stream.sessionID)) return Number.POSITIVE_INFINITY
    return this.deps.scheduler.now() + ((need - stream.tokens) * 60_000) / this.options.bytesPerMinute
  }

  private onTimer(stream: Stream): void {
    const last = stream.lastHeld
    if (!last || stream.held.lines === 0) return
    const available = this.room(stream)
    const latest = lastHeldLine(stream)
    const chosen = this.choose(this.heldPriority(stream), latest, available)
    // An envelope of lines held earlier. The held batch was never forwarded, so its seq is free for the dedupe key.
    const held = { ...fieldsOf(last.batch), lines: [], dropped: NO_DROPS }
    if (chosen) {
      this.send(stream, this.compose(stream, held, chosen), { charge: true })
    } else if (this.deps.scheduler.now() - stream.lastEnvelopeAt >= this.options.summaryIntervalMs) {
      // Past the budget: one short summary, the counts and the last line (cut by the envelope).
      const summary = this.compose(stream, held, latest ? [latest] : [], true)
      const pastTotal = this.cost(stream, summary) > this.sessionLeft(stream.sessionID)
      // Past the session's total: one summary per monitor, then silence until a person writes.
      if (pastTotal && stream.summarizedPastBudget) return
      stream.summarizedPastBudget ||= pastTotal
      this.send(stream, summary, { charge: true })
    } else {
      this.arm(stream)
    }
  }

  private clearTimer(stream: Stream): void {
    if (stream.timer !== undefined) this.deps.scheduler.clearTimeout(stream.timer.handle)
    stream.timer = undefined
  }

  private forgetStream(stream: Stream): void {
    if (this.recent === stream) this.recent = undefined
    this.clearTimer(stream)
    this.streams.delete(stream.key)
  }
}

/** The latest line held, as an object (the same one each time: its batch's records keep it). */
function lastHeldLine(stream: Stream): MonitorLine | undefined {
  const last = stream.lastHeld
  return last && last.at >= 0 ? last.lines.line(last.at) : undefined
}

/** Forgets the held batches not looked at yet (they were looked at, sent, or their priority lines are known). */
function clearUnsorted(stream: Stream): void {
  stream.unsorted = []
  stream.unsortedLines = 0
}

function estimate(lines: readonly MonitorLine[]): number {
  let bytes = ENVELOPE_OVERHEAD_BYTES
  for (const line of lines) bytes += line.byteLength + LINE_PREFIX_BYTES
  return bytes
}

/** Counts `lines` (but those `shown`) as held back: how many, their bytes, and the first seq held. */
function countHeld(held: Stream["held"], lines: BatchLines, shown?: ReadonlySet<MonitorLine>): void {
  let count = lines.length
  let bytes = lines.bytes
  let firstSeq = lines.firstSeq
  if (shown && shown.size > 0) {
    firstSeq = Number.POSITIVE_INFINITY
    for (let i = 0; i < lines.length; i++) {
      const made = lines.made(i)
      if (made && shown.has(made)) {
        count--
        bytes -= made.byteLength
      } else if (lines.seq(i) < firstSeq) firstSeq = lines.seq(i)
    }
  }
  if (count === 0) return
  if (held.lines === 0 || firstSeq < held.firstSeq) held.firstSeq = firstSeq
  held.lines += count
  held.bytes += bytes
}

function uncountHeld(held: Stream["held"], line: MonitorLine): void {
  held.lines--
  held.bytes -= line.byteLength
}

function emptyHeld(): Stream["held"] {
  return { lines: 0, bytes: 0, firstSeq: 0, dropped: { matched: 0, unmatched: 0, bytes: 0 } }
}
