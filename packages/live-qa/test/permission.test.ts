// test-runner: about 59 s (scripts/test.ts starts the longest first)
/**
 * Scenario 6: monitor_start asks opencode's `bash` permission as the bash tool does (one pattern
 * per simple command, "always" as the arity prefix + ` *`), so the user's rules decide. `deny`
 * fails the call with a clear message and spawns nothing; `allow` runs it without asking; `ask`
 * answered with `reject` spawns nothing. Commands end in `; : <marker>` so the marker stays in the
 * shell's argv (bash execs a lone simple command and would drop a trailing comment).
 */
import { expect, test } from "bun:test"
import type { LiveProject } from "../src/monitor-qa.ts"
import {
  explained,
  liveProcesses,
  planPrompt,
  replyPermission,
  stepWithTool,
  waitForProcess,
  waitForReply,
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { sleep, waitFor, waitForIdle } from "../src/timeline.ts"

// One server; each test is a project of it with its own permission rules.
const shared = serverPerFile()

const marker = (name: string) => `live-qa-${name}-${process.pid}-${Date.now()}`
const promptFor = (command: string) =>
  planPrompt("Start the watcher.", [["monitor_start", { command, label: "watcher" }]], "Watcher handled.")

async function monitorStartPart(live: LiveProject, sessionID: string, status: string) {
  return waitFor(
    async () => {
      const part = stepWithTool(await live.messages(sessionID), "monitor_start")?.parts.find(
        (p) => p.tool === "monitor_start",
      )
      return part?.state?.status === status ? part : undefined
    },
    30_000,
    100,
    `the monitor_start call to be ${status}`,
  )
}

const asked = (live: LiveProject) => live.timeline.events.filter((e) => e.type === "permission.asked")

test('permission { bash: "deny" }: monitor_start fails with the rule named, and nothing runs', async () => {
  const live = await shared.project({ permission: { bash: "deny" } })
  const tag = marker("deny")
  const command = `sleep 30; : ${tag}`
  const sessionID = await live.newSession()
  await live.prompt(sessionID, promptFor(command))
  const part = await monitorStartPart(live, sessionID, "error")
  // A denial is an error result, not the end of the turn: the agent goes on to its answer.
  await waitForReply(live, sessionID, "", (t) => t === "Watcher handled.", "the agent's answer after the denial")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  await sleep(500)

  await explained(live, { session: sessionID }, async () => {
    expect(part.state?.error).toContain(
      "The user has specified a rule which prevents you from using this specific tool call",
    )
    expect(part.state?.error).toContain('"permission":"bash"')
    expect(part.state?.error).toContain('"action":"deny"')
    // The model saw the same denial as the tool result.
    const second = live.model.scripted()[1]?.request.messages.find((m) => m.role === "tool")
    expect(JSON.stringify(second?.content)).toContain("prevents you from using this specific tool call")
    expect(asked(live)).toEqual([])
    expect(liveProcesses(tag)).toEqual([])
    expect(await live.envelopes(sessionID)).toEqual([])
    expect(live.pluginLog().join("\n")).not.toContain("monitor ended")
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 60_000)

test('permission { bash: "allow" }: monitor_start runs the command without asking', async () => {
  const live = await shared.project({ permission: { bash: "allow" } })
  const tag = marker("allow")
  const sessionID = await live.newSession()
  await live.prompt(sessionID, promptFor(`sleep 30; : ${tag}`))
  const part = await monitorStartPart(live, sessionID, "completed")
  const groups = await waitForProcess(tag, "the monitored command to run")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

  await explained(live, { session: sessionID }, async () => {
    expect(part.state?.output).toMatch(/^Started monitor mon_[0-9a-f]+ \(label: watcher\)/)
    expect(asked(live)).toEqual([])
    // The command runs in a process group of its own, not the server's.
    expect(groups.has(live.server.pid)).toBe(false)
    // In the bash tool's shell (SHELL is unset here, so bash from PATH), invoked as `<shell> -c`.
    expect(liveProcesses(tag, groups).map((e) => e.command)).toContain(`${Bun.which("bash")} -c sleep 30; : ${tag}`)
    const report = await live.stop()
    expect(report.leftovers).toEqual([])
    expect(liveProcesses(tag, groups)).toEqual([])
  })
}, 60_000)

test('permission { bash: "ask" } answered "reject": nothing runs and the turn stops', async () => {
  const live = await shared.project({ permission: { bash: "ask" } })
  const tag = marker("reject")
  const command = `sleep 30; : ${tag}`
  const sessionID = await live.newSession()
  await live.prompt(sessionID, promptFor(command))
  const request = await live.timeline.waitForEvent(
    (e) => e.type === "permission.asked" && e.sessionID === sessionID,
    30_000,
    "the permission request",
  )
  expect(request.properties.permission).toBe("bash")
  expect(request.properties.patterns).toEqual(["sleep 30", `: ${tag}`])
  expect(request.properties.always).toEqual(["sleep *", ": *"])
  expect(request.properties.metadata).toMatchObject({ command, label: "watcher" })
  expect(liveProcesses(tag)).toEqual([])

  const answered = await replyPermission(live, request.properties.id, "reject")
  expect(answered.ok).toBe(true)
  const part = await monitorStartPart(live, sessionID, "error")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  await sleep(500)

  await explained(live, { session: sessionID }, async () => {
    expect(part.state?.error).toMatch(/rejected/i)
    expect(liveProcesses(tag)).toEqual([])
    // A reject ends the agent loop: the model is not called again and the plan's answer never comes.
    expect(live.model.scripted()).toHaveLength(1)
    expect(await live.envelopes(sessionID)).toEqual([])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 60_000)

test('permission "ask" answered "always" stores the bash tool\'s offer, never the raw command', async () => {
  const live = await shared.project({ permission: { bash: "ask" } })
  const tag = marker("always")
  const first = "echo hi; exit 0"
  const second = `echo hi; sleep 30; : ${tag}`
  const reply = (id: unknown, answer: "always" | "reject") => replyPermission(live, id, answer)

  const sessionID = await live.newSession()
  await live.prompt(sessionID, promptFor(first))
  const asked1 = await live.timeline.waitForEvent((e) => e.type === "permission.asked", 30_000, "the first request")
  expect(asked1.properties.always).toEqual(["echo *", "exit *"])
  expect((await reply(asked1.properties.id, "always")).ok).toBe(true)
  await waitForIdle(live.server.client, sessionID, 30_000)

  // The same command again runs without asking.
  await live.prompt(sessionID, promptFor(first))
  await waitForIdle(live.server.client, sessionID, 30_000)
  expect(asked(live)).toHaveLength(1)

  // A compound command that merely starts with an allowed program is asked for its other parts.
  await live.prompt(sessionID, promptFor(second))
  const asked2 = await waitFor(() => asked(live)[1], 30_000, 50, "a second permission request")
  expect(asked2.properties.patterns).toEqual(["echo hi", "sleep 30", `: ${tag}`])
  expect(liveProcesses(tag)).toEqual([])
  expect((await reply(asked2.properties.id, "reject")).ok).toBe(true)
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  expect(liveProcesses(tag)).toEqual([])
  expect((await live.stop()).leftovers).toEqual([])
}, 90_000)
