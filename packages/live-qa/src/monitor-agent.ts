/**
 * The scripted "agent" of the live QA: a deterministic brain for the scripted model that does
 * what a good agent would do with opencode-monitor. A person's prompt carries the plan as
 * directives, one per line:
 *
 *   STEP <tool> <json args>     call this tool (monitor_start, bash, ...), one step at a time
 *   SAY <text>                  the final answer once every step has run
 *   USER_SAYS <text>            (alone) a person chatting; answered "Answering the user: <text>"
 *
 * A monitor envelope whose Status is terminal gets a report of the exit status, one that woke on a
 * `wake_pattern` match (a `wake:` header, Status: running) a report of the matching line (one line
 * per wake that arrived since the model last spoke); a plain observation (Status: running, no
 * `wake:` header) should never reach the model, so answering one is flagged loudly.
 */
import { type ChatRequest, lastMessage, messageText, type Script, type ScriptReply } from "./scripted-model.ts"

export const OBSERVATION_ANSWERED = "UNEXPECTED: the model was asked to answer an observation"

type Step = { tool: string; args: Record<string, unknown> }

function planOf(text: string): { steps: Step[]; say: string | undefined } {
  const steps: Step[] = []
  let say: string | undefined
  for (const line of text.split("\n")) {
    const step = line.match(/^STEP (\S+) (\{.*\})\s*$/)
    if (step) steps.push({ tool: step[1] as string, args: JSON.parse(step[2] as string) })
    const said = line.match(/^SAY (.*)$/)
    if (said) say = said[1]
  }
  return { steps, say }
}

export interface EnvelopeHead {
  monitorId: string
  batch: number
  label: string
  status: string
  /** The `wake:` header of a match wake, when there is one. */
  wake?: string
  /** The first line the `wake:` header names, as the envelope shows it. */
  wakeLine?: string
}

const HEAD = /\[OMO MONITOR OUTPUT\]\nmonitor_id: (\S+)\nbatch: (\d+)\ncommand_label: (.*)\n/g

/**
 * Every envelope in a text, in order: id, label, status, read from the text as a model reads it (the
 * scripted model sees only the prompt's text).
 */
export function envelopesIn(text: string): EnvelopeHead[] {
  return [...text.matchAll(HEAD)].map((match) => {
    const rest = text.slice(match.index ?? 0)
    const head = {
      monitorId: match[1] as string,
      batch: Number(match[2]),
      label: match[3] as string,
      status: /\nStatus: (.*)\n/.exec(rest)?.[1] ?? "running",
    }
    const wake = /\nstream_policy: untrusted_observation\n(wake: .*)\n/.exec(rest)?.[1]
    if (!wake) return head
    const seq = wake.match(/ at seq=(\d+)/)?.[1]
    const wakeLine = seq ? rest.match(new RegExp(`\\n\\[(?:stdout|stderr) seq=${seq}\\] (.*)\\n`))?.[1] : undefined
    return { ...head, wake, wakeLine }
  })
}

/** The last envelope in a text: id, label, status. */
export function lastEnvelope(text: string): EnvelopeHead | undefined {
  return envelopesIn(text).at(-1)
}

/** What the woken agent says: the exit status, as it read it from the envelope. */
export function exitReport(envelope: { monitorId: string; label: string; status: string }): string {
  const code = envelope.status.match(/code=(-?\d+)/)?.[1]
  const detail = code !== undefined ? `exit code ${code}` : envelope.status
  return `Monitor ${envelope.label} (${envelope.monitorId}) finished: ${envelope.status}. Reporting ${detail}.`
}

/** What the agent says when a match woke it while the command runs. */
export function matchReport(envelope: { monitorId: string; label: string; wake?: string; wakeLine?: string }): string {
  return `REPORT: monitor ${envelope.label} (${envelope.monitorId}) is still running and matched: ${envelope.wakeLine ?? "?"} (${envelope.wake ?? "no wake header"}).`
}

/** What the agent says when a running command woke it for its silence (`wake_on_silence_ms`). */
export function silenceReport(envelope: { monitorId: string; label: string; wake?: string }): string {
  return `SILENT: monitor ${envelope.label} (${envelope.monitorId}) is still running but printed nothing (${envelope.wake ?? "no wake header"}).`
}

/** The agent's answer to one envelope that woke it: a silence, match or exit report. */
export function wakeReport(envelope: EnvelopeHead): string {
  if (envelope.status !== "running") return exitReport(envelope)
  return envelope.wake?.startsWith("wake: no output") ? silenceReport(envelope) : matchReport(envelope)
}

export interface MonitorAgentOptions {
  /** Delay of every answer (a slow model keeps every turn running). */
  delayMs?: number
  /** Delay of the answer to a USER_SAYS message only (a person's turn that runs a while). */
  userSaysDelayMs?: number
}

export function monitorAgent(options: MonitorAgentOptions = {}): Script {
  return (request: ChatRequest): ScriptReply => {
    const reply = (r: ScriptReply): ScriptReply => (options.delayMs ? { ...r, delayMs: options.delayMs } : r)
    const messages = request.messages
    // The newest message a person wrote with a plan, and the tool calls made since.
    let planIndex = -1
    for (let i = messages.length - 1; i >= 0; i--) {
      const m = messages[i]
      if (m?.role === "user" && /^(STEP|SAY) /m.test(messageText(m))) {
        planIndex = i
        break
      }
    }
    const last = lastMessage(request)
    const lastText = last ? messageText(last) : ""
    if (last?.role === "user") {
      const envelope = lastEnvelope(lastText)
      if (envelope?.status === "running" && !envelope.wake) return reply({ text: OBSERVATION_ANSWERED })
      if (envelope) {
        // Every wake since the model last spoke: two can wake one turn together.
        let first = messages.length - 1
        while (first > 0 && messages[first - 1]?.role === "user") first--
        const pending = messages.slice(first).flatMap((m) => envelopesIn(messageText(m)))
        return reply({
          text: pending
            .filter((e) => e.status !== "running" || e.wake)
            .map(wakeReport)
            .join("\n"),
        })
      }
      const said = lastText.match(/^USER_SAYS (.*)$/m)
      if (said) {
        const answer = reply({ text: `Answering the user: ${said[1]}` })
        return options.userSaysDelayMs ? { ...answer, delayMs: options.userSaysDelayMs } : answer
      }
    }
    // A person's message stored while a wake's step ran: opencode asks again after that step.
    let person = messages.length - 1
    while (person >= 0 && messages[person]?.role !== "user") person--
    const personMessage = messages[person]
    const unanswered = personMessage ? messageText(personMessage).match(/^USER_SAYS (.*)$/m) : null
    const answered = messages.slice(person + 1).some((m) => messageText(m).startsWith("Answering the user:"))
    if (unanswered && !answered) return reply({ text: `Answering the user: ${unanswered[1]}` })
    if (planIndex === -1) return reply({ text: "ok" })
    const plan = planOf(messageText(messages[planIndex] as (typeof messages)[number]))
    const callsMade = messages.slice(planIndex + 1).filter((m) => m.role === "assistant" && m.tool_calls?.length).length
    const next = plan.steps[callsMade]
    if (next) return reply({ toolCalls: [{ name: next.tool, arguments: next.args }] })
    return reply({ text: plan.say ?? "Done." })
  }
}

/** The seed's QA: one line, three quiet seconds, exit 7. */
export const QA_COMMAND = "sh -c 'echo QA_BUILD_LINE; sleep 3; exit 7'"
export const QA_PROMPT = [
  "Build it and tell me how it ends.",
  `STEP monitor_start ${JSON.stringify({ command: QA_COMMAND, label: "qa-build" })}`,
  "SAY Started the build monitor; I will report when it exits.",
].join("\n")
