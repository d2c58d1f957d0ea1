/**
 * The differential harness for parity with opencode's bash tool: the scripted model calls `bash`
 * and `monitor_start` with the same command string in ONE step (two tool calls in one assistant
 * message per command; a batch of commands is one step with two calls each, run side by side),
 * every permission request is answered "once", and each call's outcome is read back: its tool part
 * status and the `permission.asked` events carrying its callID.
 */
import type { LiveProject } from "./monitor-qa.ts"
import { replyPermission } from "./scenario.ts"
import { lastMessage, messageText, type Script } from "./scripted-model.ts"
import type { PartView } from "./session-messages.ts"
import { getMessages, type TimedEvent, waitFor, waitForIdle } from "./timeline.ts"

const OPEN = "DIFF-COMMANDS "
const CLOSE = "\nEND-DIFF-COMMANDS"

/** A person's prompt asking the scripted model to give each command to both tools, all in one step. */
export const diffPrompt = (commands: string[]) => `${OPEN}${JSON.stringify(commands)}${CLOSE}`

/** Script: a DIFF prompt → [bash, monitor_start] per command, in one message; anything else → a short text. */
export function differentialAgent(): Script {
  return (request) => {
    const last = lastMessage(request)
    const text = last?.role === "user" ? messageText(last) : ""
    const start = text.indexOf(OPEN)
    const end = text.indexOf(CLOSE)
    if (start >= 0 && end > start) {
      const commands = JSON.parse(text.slice(start + OPEN.length, end)) as string[]
      return {
        // A label each: two monitors of one label in a session get a note about restarting.
        toolCalls: commands.flatMap((command, i) => [
          { name: "bash", arguments: { command } },
          { name: "monitor_start", arguments: { command, label: `diff-${i + 1}` } },
        ]),
      }
    }
    return { text: last?.role === "tool" ? "done" : "noted" }
  }
}

export type Ask = { permission: string; patterns: string[]; always: string[] }
/** What happened to one tool call: `ran`, `denied`, or `error: …` for any other failure. */
export type CallOutcome = {
  status: string
  verdict: string
  asks: Ask[]
  output: string
  exit: unknown
  /** The monitor a monitor_start call started. */
  monitorId?: string
}
export type DiffRow = { command: string; sessionID: string; bash: CallOutcome; monitor: CallOutcome }

/**
 * Each call gives the events recorded since the call before: events are only appended, so each is
 * looked at once and a long run does not rescan thousands.
 */
function newEvents(qa: LiveProject): () => TimedEvent[] {
  let next = 0
  return () => {
    const fresh = qa.timeline.events.slice(next)
    next += fresh.length
    return fresh
  }
}

/** Answers every permission request of the server "once" until stopped; returns the stopper. */
export function autoReplyOnce(qa: LiveProject): () => void {
  let running = true
  const fresh = newEvents(qa)
  const loop = async () => {
    while (running) {
      for (const event of fresh()) {
        const id = event.properties.id
        if (event.type !== "permission.asked" || typeof id !== "string") continue
        await replyPermission(qa, id, "once").catch(() => undefined)
      }
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
  }
  void loop()
  return () => {
    running = false
  }
}

/** The callIDs of the session's tool calls that finished (completed or error), as the bus reported them. */
function finishedCalls(qa: LiveProject, sessionID: string): () => number {
  const finished = new Set<string>()
  const fresh = newEvents(qa)
  return () => {
    for (const event of fresh()) {
      if (event.type !== "message.part.updated" || event.sessionID !== sessionID) continue
      const part = event.properties.part as PartView | undefined
      const status = part?.state?.status
      if (part?.type === "tool" && part.callID && (status === "completed" || status === "error"))
        finished.add(part.callID)
    }
    return finished.size
  }
}

/**
 * How many commands share one step: each starts a monitor, and a session runs at most 16 at once
 * (`max_monitors_per_session`, which the differential tests set to this).
 */
export const COMMANDS_PER_STEP = 16

export interface DifferentialOptions {
  timeoutMs?: number
  /**
   * Delete each step's session once its rows are read. Every monitor of a step wakes the session
   * when it exits, and each wake is a model turn (about 0.25 CPU-s of the server's, a dozen per
   * step): a test that compares only the verdicts has no use for them.
   */
  deleteSessions?: boolean
  /** The agent each step's prompt runs as ("build" by default): its permission rules are the ones both tools meet. */
  agent?: string
}

/**
 * Runs each command through both tools and reads back both outcomes of each: one row per command,
 * in order. Up to COMMANDS_PER_STEP commands share one step of a fresh session. The commands must
 * be distinct: a row finds its calls by the command string.
 */
export async function runDifferential(
  qa: LiveProject,
  commands: string[],
  { timeoutMs = 120_000, deleteSessions = false, agent }: DifferentialOptions = {},
): Promise<DiffRow[]> {
  if (new Set(commands).size !== commands.length) throw new Error("runDifferential: the commands must be distinct")
  const rows: DiffRow[] = []
  for (let i = 0; i < commands.length; i += COMMANDS_PER_STEP) {
    const step = await runStep(qa, commands.slice(i, i + COMMANDS_PER_STEP), timeoutMs, agent)
    rows.push(...step)
    const sessionID = step[0]?.sessionID
    if (deleteSessions && sessionID) {
      const deleted = await qa.server.client.session.delete({ path: { id: sessionID } })
      if (deleted.error) throw new Error(`session.delete failed: ${JSON.stringify(deleted.error)}`)
    }
  }
  return rows
}

async function runStep(qa: LiveProject, commands: string[], timeoutMs: number, agent?: string): Promise<DiffRow[]> {
  const sessionID = await qa.newSession({ title: "differential" })
  const finished = finishedCalls(qa, sessionID)
  await qa.prompt(sessionID, diffPrompt(commands), { agent })
  const calls = 2 * commands.length
  // The bus says when every call finished; the session is read once, then.
  await waitFor(
    () => finished() >= calls,
    timeoutMs,
    100,
    `all ${calls} tool calls of ${commands.length} commands to finish`,
  )
  await waitForIdle(qa.server.client, sessionID, timeoutMs, { busyGraceMs: 0 })
  const parts = (await getMessages(qa.server.client, sessionID)).flatMap((m) => m.parts)
  const call = (tool: string, command: string) => {
    const part = parts.find(
      (p) => p.type === "tool" && p.tool === tool && (p.state?.input as { command?: unknown })?.command === command,
    )
    if (!part) throw new Error(`no ${tool} call of ${JSON.stringify(command)} in session ${sessionID}`)
    return outcome(qa, part)
  }
  return commands.map((command) => ({
    command,
    sessionID,
    bash: call("bash", command),
    monitor: call("monitor_start", command),
  }))
}

function outcome(qa: LiveProject, part: PartView): CallOutcome {
  const asks = qa.timeline.events
    .filter((e) => e.type === "permission.asked")
    .filter((e) => (e.properties.tool as { callID?: string } | undefined)?.callID === part.callID)
    .map((e) => ({
      permission: String(e.properties.permission),
      patterns: (e.properties.patterns as string[]) ?? [],
      always: (e.properties.always as string[]) ?? [],
    }))
  const status = part.state?.status ?? "?"
  const error = part.state?.error ?? ""
  const verdict =
    status === "completed"
      ? "ran"
      : error.includes("specified a rule which prevents")
        ? "denied"
        : `error: ${error.split("\n")[0]?.slice(0, 120)}`
  const metadata = (part.state as { metadata?: { exit?: unknown; monitorId?: string } } | undefined)?.metadata
  const output = part.state?.output ?? error
  return { status, verdict, asks, output, exit: metadata?.exit, monitorId: metadata?.monitorId }
}

const RANK: Record<string, number> = { ran: 0, denied: 2 }

/** How strict an outcome is: ran silently 0, ran after asking 1, denied 2 (asked or not, it did not run). */
export function strictness(o: CallOutcome): number {
  if (o.verdict === "denied") return RANK.denied as number
  if (o.verdict === "ran") return o.asks.length > 0 ? 1 : 0
  return 3
}

/** Kinds asked, in order, each with its "always" offer: what a person is asked. */
export const askSignature = (o: CallOutcome) =>
  o.asks.map((a) => `${a.permission}[${a.always.join(", ")}]`).join(" + ") || "-"

/** The verdict table: one row per command, bash tool vs monitor_start. */
export function renderTable(title: string, rows: DiffRow[], marks: (row: DiffRow) => string): string {
  const cell = (s: string) => s.replaceAll("|", "\\|").replaceAll("\n", "\\n")
  const lines = [
    `### ${title}`,
    "",
    "| # | command | bash tool | monitor_start | same |",
    "|---|---|---|---|---|",
    ...rows.map(
      (r, i) =>
        `| ${i + 1} | \`${cell(r.command)}\` | ${r.bash.verdict}; ${cell(askSignature(r.bash))} | ${r.monitor.verdict}; ${cell(askSignature(r.monitor))} | ${marks(r)} |`,
    ),
  ]
  return lines.join("\n")
}

/**
 * Like Promise.all, but waits for every run before failing: a run still starting its server when
 * another fails would otherwise register that server after the file's cleanup and leave it running.
 */
export async function allRuns<T>(runs: Promise<T>[]): Promise<T[]> {
  const settled = await Promise.allSettled(runs)
  const failed = settled.find((s) => s.status === "rejected")
  if (failed) throw failed.reason
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value)
}
