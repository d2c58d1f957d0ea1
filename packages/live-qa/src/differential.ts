/**
 * The differential harness for parity with opencode's bash tool: the scripted model calls `bash`
 * and `monitor_start` with the same command string in ONE step (two tool calls in one assistant
 * message), every permission request is answered "once", and each call's outcome is read back:
 * its tool part status and the `permission.asked` events carrying its callID.
 */
import type { MonitorQA } from "./monitor-qa.ts"
import { replyPermission, waitForSession } from "./scenario.ts"
import { lastMessage, messageText, type Script } from "./scripted-model.ts"
import type { PartView } from "./session-messages.ts"
import { waitForIdle } from "./timeline.ts"

const OPEN = "DIFF-COMMAND "
const CLOSE = "\nEND-DIFF-COMMAND"

/** A person's prompt asking the scripted model to give `command` to both tools in one step. */
export const diffPrompt = (command: string) => `${OPEN}${JSON.stringify(command)}${CLOSE}`

/** Script: a DIFF prompt → [bash, monitor_start] in one message; anything else → a short text. */
export function differentialAgent(): Script {
  return (request) => {
    const last = lastMessage(request)
    const text = last?.role === "user" ? messageText(last) : ""
    const start = text.indexOf(OPEN)
    const end = text.indexOf(CLOSE)
    if (start >= 0 && end > start) {
      const command = JSON.parse(text.slice(start + OPEN.length, end)) as string
      return {
        toolCalls: [
          { name: "bash", arguments: { command } },
          { name: "monitor_start", arguments: { command, label: "diff" } },
        ],
      }
    }
    return { text: last?.role === "tool" ? "done" : "noted" }
  }
}

export type Ask = { permission: string; patterns: string[]; always: string[] }
/** What happened to one tool call: `ran`, `denied`, or `error: …` for any other failure. */
export type CallOutcome = { status: string; verdict: string; asks: Ask[]; output: string; exit: unknown }
export type DiffRow = { command: string; sessionID: string; bash: CallOutcome; monitor: CallOutcome }

/** Answers every permission request of the server "once" until stopped; returns the stopper. */
export function autoReplyOnce(qa: MonitorQA): () => void {
  const answered = new Set<string>()
  let running = true
  const loop = async () => {
    while (running) {
      for (const event of qa.timeline.events) {
        const id = event.properties.id
        if (event.type !== "permission.asked" || typeof id !== "string" || answered.has(id)) continue
        answered.add(id)
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

/** Runs one command through both tools in a fresh session and reads back both outcomes. */
export async function runDifferential(qa: MonitorQA, command: string, timeoutMs = 60_000): Promise<DiffRow> {
  const sessionID = await qa.newSession({ title: "differential" })
  await qa.prompt(sessionID, diffPrompt(command))
  const parts = await waitForSession(
    qa,
    sessionID,
    async () => {
      const all = (await qa.messages(sessionID)).flatMap((m) => m.parts)
      const bash = all.find((p) => p.type === "tool" && p.tool === "bash")
      const monitor = all.find((p) => p.type === "tool" && p.tool === "monitor_start")
      const done = (p: PartView | undefined) => p?.state?.status === "completed" || p?.state?.status === "error"
      return done(bash) && done(monitor) ? { bash: bash as PartView, monitor: monitor as PartView } : undefined
    },
    timeoutMs,
    `both tool calls of ${JSON.stringify(command)} to finish`,
  )
  await waitForIdle(qa.server.client, sessionID, timeoutMs, { busyGraceMs: 0 })
  return { command, sessionID, bash: outcome(qa, parts.bash), monitor: outcome(qa, parts.monitor) }
}

function outcome(qa: MonitorQA, part: PartView): CallOutcome {
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
  const metadata = (part.state as { metadata?: { exit?: unknown } } | undefined)?.metadata
  return { status, verdict, asks, output: part.state?.output ?? error, exit: metadata?.exit }
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
