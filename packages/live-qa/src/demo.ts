/**
 * The main job (`npm run demo`): a real `opencode serve` with the local opencode-monitor plugin and
 * a scripted model. The agent starts `sh -c 'echo QA_BUILD_LINE; sleep 3; exit 7'` and finishes
 * its turn; the command's line arrives as an observation; on exit the session wakes by itself and
 * the agent reports exit code 7. Prints the timeline and writes it to .omo/evidence/.
 * Act two (wake_pattern): a dev server prints `ready on :5173` after two seconds and keeps running;
 * that line wakes the session once, and the agent reports readiness while the server still runs.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { envelopesIn, exitReport, matchReport, QA_COMMAND, QA_PROMPT } from "./monitor-agent.ts"
import {
  type Envelope,
  MONITOR_TOOLS,
  type MonitorQA,
  PLUGIN_PATH,
  startMonitorQA,
  toolNamesSeen,
} from "./monitor-qa.ts"
import { renderMessages, type SessionMessage, textOf, waitFor, waitForIdle } from "./timeline.ts"

const REPO = resolve(import.meta.dir, "../../..")
const say = (line: string) => console.log(`[demo +${((Date.now() - t0) / 1000).toFixed(2)}s] ${line}`)
const t0 = Date.now()

async function main(): Promise<number> {
  say(`starting the scripted model and opencode serve with the local plugin ${relative(REPO, PLUGIN_PATH)}`)
  const qa = await startMonitorQA()
  let failed: string | undefined
  try {
    say(`opencode ${qa.server.url} listening after ${qa.server.startupMs} ms (project ${qa.server.directory})`)
    const sessionID = await qa.newSession({ title: "opencode-monitor demo" })
    say(
      `session ${sessionID}: the person asks the agent to build; the agent calls monitor_start ${JSON.stringify(QA_COMMAND)}`,
    )
    await qa.prompt(sessionID, QA_PROMPT)
    const { wake, messages } = await untilAnswered(
      qa,
      sessionID,
      (e) => e.status !== "running",
      "the terminal envelope and the assistant turn it wakes",
    )
    failed = verify(messages, await qa.envelopes(sessionID), wake, qa)
    const evidence = writeEvidence(qa, sessionID, messages, failed)
    say(`timeline written to ${relative(REPO, evidence)}`)
    console.log(`\n${renderMessages(messages)}\n`)
    console.log(qa.pluginLog().map(shortLog).join("\n"))
    failed ??= await actTwo(qa)
  } catch (error) {
    failed = error instanceof Error ? error.message : String(error)
  } finally {
    const stop = await qa.stop()
    say(`server stopped (dispose ${stop.disposeOk ? "ok" : "failed"}); processes left behind: ${stop.leftovers.length}`)
    if (stop.leftovers.length > 0) failed ??= `processes left behind: ${JSON.stringify(stop.leftovers)}`
  }
  console.log(
    failed
      ? `\nFAIL: ${failed}`
      : "\nPASS: the session woke by itself on exit code 7 and the agent reported it; a readiness line woke it while the server ran.",
  )
  return failed ? 1 : 0
}

/**
 * Prints the session's messages as they complete until an envelope `isWake` picks has a finished
 * assistant turn after it and the session is idle; returns that envelope and the messages.
 */
async function untilAnswered(
  qa: MonitorQA,
  sessionID: string,
  isWake: (envelope: Envelope) => boolean,
  what: string,
): Promise<{ wake: Envelope; messages: SessionMessage[] }> {
  const report = reporter()
  const wake = await waitFor(
    async () => {
      const messages = await qa.messages(sessionID)
      report(messages)
      const woke = (await qa.envelopes(sessionID)).find(isWake)
      if (!woke) return undefined
      const after = messages.slice(messages.findIndex((m) => m.info.id === woke.message.info.id) + 1)
      return after.some((m) => m.info.role === "assistant" && m.info.time.completed) ? woke : undefined
    },
    60_000,
    200,
    what,
  )
  await waitForIdle(qa.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  const messages = await qa.messages(sessionID)
  report(messages)
  return { wake, messages }
}

/** Prints each message of a session once, as it completes. */
function reporter(): (messages: SessionMessage[]) => void {
  const seen = new Set<string>()
  return (messages) => {
    for (const m of messages) {
      const key = `${m.info.id}:${m.info.time.completed ? "done" : "open"}`
      if (seen.has(key) || (m.info.role === "assistant" && !m.info.time.completed)) continue
      seen.add(key)
      const text = textOf(m).split("\n")
      if (m.info.role === "user") {
        const synthetic = m.parts.some((p) => p.type === "text" && p.synthetic)
        const head = envelopesIn(textOf(m))[0]
        const why = head?.wake ? ` (${head.wake})` : ""
        say(synthetic ? `  injected envelope ${text[2]} Status: ${head?.status}${why}` : `  person: ${text[0]}`)
      } else {
        const tools = m.parts.filter((p) => p.type === "tool").map((p) => `${p.tool} (${p.state?.status})`)
        say(`  assistant (${m.info.finish}): ${tools.length ? `calls ${tools.join(", ")}` : text.join(" ")}`)
      }
    }
  }
}

const DEV_COMMAND = "echo compiling; sleep 2; echo 'ready on :5173'; sleep 60"

/** Act two: a line, not the exit, wakes the session; the command keeps running. */
async function actTwo(qa: MonitorQA): Promise<string | undefined> {
  const sessionID = await qa.newSession({ title: "opencode-monitor demo, act two" })
  say(
    `act two, session ${sessionID}: the agent starts a dev server with wake_pattern "ready on": ${JSON.stringify(DEV_COMMAND)}`,
  )
  await qa.prompt(
    sessionID,
    [
      "Start the dev server and tell me when it is ready.",
      `STEP monitor_start ${JSON.stringify({ command: DEV_COMMAND, label: "dev-server", wake_pattern: "ready on" })}`,
      "SAY Dev server starting; I will tell you when it is ready.",
    ].join("\n"),
  )
  const { wake, messages } = await untilAnswered(
    qa,
    sessionID,
    (e) => e.status === "running" && e.text.includes("\nwake: "),
    "the readiness wake and the assistant turn it starts",
  )
  const envelopes = await qa.envelopes(sessionID)
  // `compiling` comes as an observation of its own, or inside the wake when it was still waiting.
  const statuses = envelopes.map((e) => `${e.status}${e.text.includes("\nwake: ") ? "+wake" : ""}`).join(", ")
  if (!/^(running, )?running\+wake$/.test(statuses)) return `act two: unexpected envelopes: ${statuses}`
  const delivered = envelopes.flatMap((e) => [...e.text.matchAll(/\[stdout seq=(\d+)\]/g)].map((m) => m[1])).join(",")
  if (delivered !== "1,2") return `act two: lines delivered ${delivered}, expected seq 1 and 2 once each`
  const head = envelopesIn(wake.text)[0]
  const expected = matchReport({
    monitorId: wake.monitorId,
    label: "dev-server",
    wake: head?.wake,
    wakeLine: "ready on :5173",
  })
  const answer = messages[messages.findIndex((m) => m.info.id === wake.message.info.id) + 1]
  if (textOf(answer) !== expected) return `act two: the woken turn said ${JSON.stringify(textOf(answer))}`
  const listed = qa.pluginLog().some((line) => line.includes(wake.monitorId) && /matchWake=1\/1/.test(line))
  if (!listed) return "act two: no match wake in the plugin log"
  say("act two: woken once by the readiness line while the server still runs; it is stopped with the server")
  return undefined
}

function verify(messages: SessionMessage[], envelopes: Envelope[], wake: Envelope, qa: MonitorQA): string | undefined {
  if (toolNamesSeen(qa.model).sort().join() !== MONITOR_TOOLS.join())
    return "the plugin's tools were not offered to the model"
  const statuses = envelopes.map((e) => `${e.batch}:${e.status}`).join(", ")
  if (statuses !== "1:running, 2:exited (code=7)") return `unexpected envelopes: ${statuses}`
  const index = messages.findIndex((m) => m.info.id === wake.message.info.id)
  const answer = messages[index + 1]
  const expected = exitReport({ monitorId: wake.monitorId, label: "qa-build", status: "exited (code=7)" })
  if (textOf(answer) !== expected) return `the woken turn said ${JSON.stringify(textOf(answer))}`
  return undefined
}

const shortLog = (line: string) =>
  line.replace(/^timestamp=\S+T(\S+)Z level=(\S+) run=\S+ /, "$1 $2 ").replace(/sessionID=\S+ /, "")

function writeEvidence(
  qa: MonitorQA,
  sessionID: string,
  messages: SessionMessage[],
  failed: string | undefined,
): string {
  const day = new Date().toISOString().slice(0, 10).replaceAll("-", "")
  const dir = join(REPO, ".omo/evidence", `${day}-monitor-terminal-wake`)
  mkdirSync(dir, { recursive: true })
  const events = qa.timeline.render(
    (e) => e.sessionID === sessionID && ["session.status", "session.idle", "message.updated"].includes(e.type),
  )
  writeFileSync(
    join(dir, "live-harness.txt"),
    [
      `# opencode-monitor live QA — terminal wake (${new Date().toISOString()})`,
      `opencode ${qa.server.url}, plugin ${relative(REPO, PLUGIN_PATH)} (local source), scripted model ${qa.model.baseURL}`,
      `command: ${QA_COMMAND}`,
      `result: ${failed ? `FAIL: ${failed}` : "PASS"}`,
      "",
      "## Session messages (v1 message API; times relative to the first message)",
      renderMessages(messages),
      "",
      "## Bus events for the session",
      events,
      "",
      "## Plugin dispatch log",
      ...qa.pluginLog().map(shortLog),
      "",
      "## Model requests (what the scripted model was asked, in order)",
      ...qa.model.requests.map(
        (r, i) =>
          `${i + 1}. +${((r.at - (qa.model.requests[0]?.at ?? r.at)) / 1000).toFixed(3)}s ${r.toolless ? "title (no tools)" : "agent step"} → ${JSON.stringify(r.reply ?? r.error ?? "").slice(0, 140)}`,
      ),
      "",
    ].join("\n"),
  )
  writeFileSync(
    join(dir, "README.md"),
    [
      "# Live QA: the terminal batch wakes the parent session",
      "",
      "Written by `npm run demo` (packages/live-qa/src/demo.ts); the same flow is the live test",
      "`packages/live-qa/test/terminal-wake.test.ts`.",
      "",
      "## What was run",
      "- A real `opencode serve` (opencode-ai from this repo's devDependencies), isolated HOME/XDG dirs,",
      "  offline, in its own process group, with one plugin: the local source",
      "  `packages/opencode-monitor/src/index.ts` (never the npm package).",
      "- A scripted OpenAI-compatible model on 127.0.0.1. Its script: on the person's prompt, call",
      `  \`monitor_start\` with \`${QA_COMMAND}\`, then answer; when an envelope with a terminal`,
      "  `Status:` reaches it, report the exit status it reads there. Answering an observation is a failure.",
      "",
      "## What it shows (live-harness.txt)",
      "1. The agent's turn ends; the session is idle.",
      "2. Batch 1 (`[stdout seq=1] QA_BUILD_LINE`, `Status: running`) lands as a synthetic user message",
      "   with `noReply`: no assistant turn follows it (log: `shouldReply=false`).",
      "3. Three seconds later the command exits 7. Batch 2, a zero-line terminal batch",
      "   (`Status: exited (code=7)`), lands with `shouldReply=true`, and with no human input an",
      "   assistant turn follows that reports exit code 7. The session ends idle.",
      "4. Batch 2 exists although the periodic flush had already drained the buffer: the pipeline's",
      "   terminal flush is `flushNow({ allowEmpty: true, status })`. With a plain `flushNow()` there",
      "   is no batch 2 and no wake (see `red-green.txt` when present).",
      "",
      `Result of this run: ${failed ? `FAIL — ${failed}` : "PASS"}.`,
      "",
    ].join("\n"),
  )
  return dir
}

process.exit(await main())
