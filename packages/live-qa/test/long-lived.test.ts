// test-runner: about 74 s (scripts/test.ts starts the longest first)
/**
 * Jobs never meant to end, against one real opencode serve and the scripted agent:
 * (1) a hung command with wake_on_silence_ms wakes its session once, Status running, while the
 *     process lives; a chatty monitor in the same session never wakes for silence;
 * (2) a subagent's silence wake reaches the root session, naming the child;
 * (3) a real HTTP server on a fixed port restarted with monitor_restart: the new one answers on the
 *     same port, the old pid is gone, no EADDRINUSE, no wake for the restart, and its wake_pattern
 *     readiness wake comes again;
 * (4) monitor_restart under an `ask` rule asks again; under a deny (an agent whose rules deny bash)
 *     it is refused and the old monitor keeps running.
 * One server for all four (each in its own session): 30 s on the idle 2-core machine, 65 s under load.
 */
import { afterAll, beforeAll, expect, test } from "bun:test"
import { freePort } from "../src/free-port.ts"
import { matchReport, OBSERVATION_ANSWERED, silenceReport } from "../src/monitor-agent.ts"
import { type Envelope, type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import {
  after,
  explained,
  isAssistant,
  liveProcesses,
  parentWithChild,
  planPrompt,
  replyPermission,
  waitForProcess,
  waitForReply,
  waitForWake,
} from "../src/scenario.ts"
import { type SessionMessage, sleep, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

const ASK_MARK = "ask-again"
let live: MonitorQA

beforeAll(async () => {
  live = await startMonitorQA({
    // Everything runs silently except commands carrying the ask marker; the `locked` agent's own
    // rules deny bash (as a user who keeps one agent away from the shell would write them).
    permission: { bash: { "*": "allow", [`*${ASK_MARK}*`]: "ask" } },
    config: { agent: { locked: { mode: "primary", permission: { bash: "deny" } } } },
  })
}, 60_000)

afterAll(async () => {
  const report = await live?.stop()
  expect(report?.leftovers ?? []).toEqual([])
})

const mark = (name: string) => `ll-${name}-${process.pid}-${Date.now()}`
const silenceHeader = (e: Envelope) => e.text.match(/\n(wake: no output for .*)\n/)?.[1]
const isSilenceWake = (e: Envelope) => e.status === "running" && silenceHeader(e) !== undefined
const isMatchWake = (e: Envelope) => e.status === "running" && /\nwake: line/.test(e.text)

type ToolPart = { type: string; tool?: string; state?: { status?: string; output?: string; error?: string } }
/** The settled part of the latest call of `tool` in a session. */
function toolPart(sessionID: string, tool: string, what: string): Promise<ToolPart> {
  return waitFor(
    async () => {
      const parts = (await live.messages(sessionID)).flatMap((m) => m.parts as ToolPart[])
      const part = parts.filter((p) => p.type === "tool" && p.tool === tool).at(-1)
      return part?.state?.status === "completed" || part?.state?.status === "error" ? part : undefined
    },
    30_000,
    100,
    what,
  )
}
const startedId = (output: string | undefined) => output?.match(/Started monitor (mon_[0-9a-f]+)/)?.[1] ?? "?"

async function stopAll(sessionID: string, ids: string[]) {
  await live.prompt(
    sessionID,
    planPrompt(
      "Stop them.",
      ids.map((id) => ["monitor_stop", { monitor_id: id }]),
      "Stopped.",
    ),
  )
  await waitForReply(live, sessionID, "", (t) => t === "Stopped.", "the stop answer")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
}

test("a hung command wakes once for its silence, Status running, while it lives; a chatty one never does", async () => {
  const hung = mark("hung")
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Run the tests and the log tail; tell me if the tests hang.",
      [
        [
          "monitor_start",
          { command: `echo started ${hung}; sleep 300; : ${hung}`, label: "tests", wake_on_silence_ms: 3_000 },
        ],
        [
          "monitor_start",
          { command: "while :; do echo tick; sleep 0.3; done", label: "chatty", wake_on_silence_ms: 3_000 },
        ],
      ],
      "Both running.",
    ),
  )
  const groups = await waitForProcess(hung, "the hung command")
  const { envelope: wake, reply } = await waitForWake(
    live,
    sessionID,
    isSilenceWake,
    (t) => t.startsWith("SILENT:"),
    "the silence wake",
    45_000,
  )
  // Time for a second (wrong) silence wake of either monitor: three more silence periods.
  await sleep(9_000)
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

  await explained(live, { silence: sessionID }, async () => {
    expect(liveProcesses(hung, groups).length).toBeGreaterThan(0)
    expect(silenceHeader(wake)).toBe("wake: no output for 3000 ms (last output at seq=1)")
    expect(wake.text).toContain(`[stdout seq=1] started ${hung}`)
    expect(wake.text).toContain("\nStatus: running\n")
    expect(textOf(reply)).toBe(silenceReport({ monitorId: wake.monitorId, label: "tests", wake: silenceHeader(wake) }))
    expect(reply.info.parentID).toBe(wake.message.info.id)
    const envelopes = await live.envelopes(sessionID)
    const wakes = envelopes.filter((e) => e.status === "running" && /\nwake: /.test(e.text))
    expect(wakes.map((e) => e.message.info.id)).toEqual([wake.message.info.id])
    // The chatty monitor's output arrived as observations, none answered.
    const chatty = envelopes.filter((e) => e.monitorId !== wake.monitorId)
    expect(chatty.length).toBeGreaterThan(0)
    const messages = await live.messages(sessionID)
    expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
    const said = messages.find((m) => isAssistant(m) && textOf(m) === "Both running.")
    expect(
      after(messages, said?.info.id ?? "")
        .filter(isAssistant)
        .map((m) => m.info.id),
    ).toEqual([reply.info.id])
    expect(live.pluginLog().join("\n")).toMatch(
      new RegExp(`"sent monitor output".*monitorId=${wake.monitorId} .*shouldReply=true .*matchWake=silence`),
    )
    await stopAll(sessionID, [wake.monitorId, chatty[0]?.monitorId ?? "?"])
    await waitFor(() => liveProcesses(hung, groups).length === 0, 15_000, 100, "the hung command gone")
  })
}, 150_000)

test("a subagent's silence wake reaches the root session, naming the child; the child is not woken", async () => {
  const { parentID, childID } = await parentWithChild(
    live,
    planPrompt(
      "Start the build for the parent.",
      [
        [
          "monitor_start",
          { command: `echo building ${mark("child")}; sleep 300`, label: "child-build", wake_on_silence_ms: 3_000 },
        ],
      ],
      "Child started the build.",
    ),
  )
  const { envelope: wake, reply } = await waitForWake(
    live,
    parentID,
    isSilenceWake,
    (t) => t.startsWith("SILENT:"),
    "the silence wake in the root",
    45_000,
  )
  await explained(live, { parent: parentID, child: childID }, async () => {
    expect(wake.text).toContain(`\nsubagent_session: ${childID}\n`)
    expect(silenceHeader(wake)).toBe("wake: no output for 3000 ms (last output at seq=1)")
    expect(wake.text).toContain("[stdout seq=1] building")
    expect(textOf(reply)).toBe(
      silenceReport({ monitorId: wake.monitorId, label: "child-build", wake: silenceHeader(wake) }),
    )
    const child = await live.envelopes(childID)
    expect(child.filter((e) => /\nwake: /.test(e.text))).toEqual([])
    const childMessages = await live.messages(childID)
    const said = childMessages.find((m) => isAssistant(m) && textOf(m) === "Child started the build.")
    expect(after(childMessages, said?.info.id ?? "").filter(isAssistant)).toEqual([])
    await stopAll(childID, [wake.monitorId])
  })
}, 120_000)

test("monitor_restart of a real HTTP server on a fixed port: the new one answers there, the old pid is gone, no EADDRINUSE, no wake for the restart, the readiness wake comes again", async () => {
  const port = await freePort()
  const server = `require("http").createServer((q, r) => r.end(String(process.pid))).listen(${port}, "127.0.0.1", () => console.log("listening on ${port} pid " + process.pid))`
  const command = `node -e '${server}'`
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Start the web server.",
      [["monitor_start", { command, label: "web", wake_pattern: "listening on" }]],
      "Web server starting.",
    ),
  )
  const ready = await waitForWake(live, sessionID, isMatchWake, (t) => t.startsWith("REPORT:"), "the first readiness")
  const firstPid = Number(await (await fetch(`http://127.0.0.1:${port}/`)).text())
  expect(firstPid).toBeGreaterThan(0)
  const oldId = ready.envelope.monitorId

  await live.prompt(
    sessionID,
    planPrompt("I changed the config; restart it.", [["monitor_restart", { monitor_id: oldId }]], "Restarted."),
  )
  const part = await toolPart(sessionID, "monitor_restart", "the monitor_restart result")
  const newId = startedId(part.state?.output)
  const again = await waitForWake(
    live,
    sessionID,
    (e) => isMatchWake(e) && e.monitorId === newId,
    (t) => t.startsWith("REPORT:"),
    "the readiness of the restarted server",
  )
  const secondPid = Number(await (await fetch(`http://127.0.0.1:${port}/`)).text())

  await explained(live, { web: sessionID }, async () => {
    expect(part.state?.status).toBe("completed")
    expect(part.state?.output).toContain(
      `Restarted: the old monitor ${oldId} ended with status stopped; the new one is ${newId}.`,
    )
    expect(secondPid).not.toBe(firstPid)
    expect(await pidAlive(firstPid)).toBe(false)
    expect(again.envelope.text).toContain(`listening on ${port} pid ${secondPid}`)
    expect(textOf(again.reply)).toBe(
      matchReport({
        monitorId: newId,
        label: "web",
        wake: again.envelope.text.match(/\n(wake: .*)\n/)?.[1],
        wakeLine: `listening on ${port} pid ${secondPid}`,
      }),
    )
    const envelopes = await live.envelopes(sessionID)
    expect(envelopes.some((e) => e.text.includes("EADDRINUSE"))).toBe(false)
    // Nothing of the old one after the restart (no terminal batch, no wake); the new one woke once.
    expect(envelopes.filter((e) => e.monitorId === oldId).map((e) => e.status)).toEqual(["running"])
    expect(envelopes.filter((e) => e.monitorId === newId).map((e) => e.message.info.id)).toEqual([
      again.envelope.message.info.id,
    ])
    const messages = await live.messages(sessionID)
    const restarted = messages.find((m) => isAssistant(m) && textOf(m) === "Restarted.")
    expect(
      after(messages, restarted?.info.id ?? "")
        .filter(isAssistant)
        .map((m) => m.info.id),
    ).toEqual([again.reply.info.id])
    expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
    await stopAll(sessionID, [newId])
    expect(await pidAlive(secondPid)).toBe(false)
  })
}, 150_000)

test("monitor_restart is judged again: an ask rule asks again, a deny refuses and the old monitor keeps running", async () => {
  const tag = mark(ASK_MARK)
  const command = `sleep 300; : ${tag}`
  const sessionID = await live.newSession()
  const asked = () => live.timeline.events.filter((e) => e.type === "permission.asked" && e.sessionID === sessionID)
  await live.prompt(
    sessionID,
    planPrompt("Start the worker.", [["monitor_start", { command, label: "worker" }]], "Worker started."),
  )
  const first = await waitFor(() => asked()[0], 30_000, 50, "the start's permission request")
  expect((await replyPermission(live, first.properties.id, "once")).ok).toBe(true)
  const started = await toolPart(sessionID, "monitor_start", "the monitor_start result")
  const oldId = startedId(started.state?.output)
  const groups = await waitForProcess(tag, "the worker")
  await waitForReply(live, sessionID, "", (t) => t === "Worker started.", "the start answer")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

  // Under the `ask` rule the restart asks again, with the bash tool's patterns for the same command.
  await live.prompt(
    sessionID,
    planPrompt("Restart the worker.", [["monitor_restart", { monitor_id: oldId }]], "Worker restarted."),
  )
  const second = await waitFor(() => asked()[1], 30_000, 50, "the restart's permission request")
  expect(second.properties.permission).toBe("bash")
  expect(second.properties.patterns).toEqual(["sleep 300", `: ${tag}`])
  expect(liveProcesses(tag, groups).length).toBeGreaterThan(0)
  expect((await replyPermission(live, second.properties.id, "once")).ok).toBe(true)
  const restarted = await toolPart(sessionID, "monitor_restart", "the monitor_restart result")
  const newId = startedId(restarted.state?.output)
  await waitForReply(live, sessionID, "", (t) => t === "Worker restarted.", "the restart answer")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  const newGroups = await waitForProcess(tag, "the restarted worker")

  // From the `locked` agent, whose rules deny bash: refused, and the running one is untouched.
  await live.prompt(
    sessionID,
    planPrompt("Restart the worker again.", [["monitor_restart", { monitor_id: newId }]], "Restart handled."),
    { agent: "locked" },
  )
  const denied = await waitFor(
    async () => {
      const parts = (await live.messages(sessionID)).flatMap((m) => m.parts as ToolPart[])
      const part = parts.filter((p) => p.type === "tool" && p.tool === "monitor_restart").at(-1)
      return part?.state?.status === "error" ? part : undefined
    },
    30_000,
    100,
    "the denied restart",
  )
  await waitForReply(live, sessionID, "", (t) => t === "Restart handled.", "the answer after the denial")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

  await explained(live, { worker: sessionID }, async () => {
    expect(restarted.state?.output).toContain(`the old monitor ${oldId} ended with status stopped`)
    expect(newId).not.toBe(oldId)
    expect(denied.state?.error).toContain("prevents you from using this specific tool call")
    expect(denied.state?.error).toContain('"action":"deny"')
    expect(asked()).toHaveLength(2)
    expect(liveProcesses(tag, newGroups).length).toBeGreaterThan(0)
    const list = await listMonitors(sessionID)
    expect(list.filter((m) => m.status === "running").map((m) => m.monitor_id)).toEqual([newId])
    await stopAll(sessionID, [newId])
    await waitFor(() => liveProcesses(tag, newGroups).length === 0, 15_000, 100, "the worker gone")
  })
}, 150_000)

/** monitor_list, called by the scripted agent, as the agent reads it. */
async function listMonitors(sessionID: string): Promise<{ monitor_id: string; status: string }[]> {
  await live.prompt(sessionID, planPrompt("List them.", [["monitor_list", {}]], "Listed."))
  const part = await waitFor(
    async () => {
      const messages: SessionMessage[] = await live.messages(sessionID)
      const last = messages.filter((m) => isAssistant(m) && textOf(m) === "Listed.").at(-1)
      if (!last) return undefined
      const parts = messages.flatMap((m) => m.parts as ToolPart[])
      return parts.filter((p) => p.type === "tool" && p.tool === "monitor_list").at(-1)
    },
    30_000,
    100,
    "the monitor_list result",
  )
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  return JSON.parse(part.state?.output ?? "{}").monitors ?? []
}

/** False once the process is gone or a zombie. */
async function pidAlive(pid: number): Promise<boolean> {
  const stat = Bun.spawnSync(["ps", "-o", "stat=", "-p", String(pid)])
    .stdout.toString()
    .trim()
  return stat !== "" && !stat.startsWith("Z")
}
