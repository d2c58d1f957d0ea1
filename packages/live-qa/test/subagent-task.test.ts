// test-runner: about 62 s (scripts/test.ts starts the longest first)
/**
 * Subagents, through opencode's real `task` tool: the scripted model plays the root, which
 * delegates to a `general` subagent, and the subagent, which starts a monitor and returns.
 * - default: the exit notice wakes the ROOT (attributed with `subagent_session:` and the label),
 *   one REPORT turn there, nothing reply-wanting in the child;
 * - `subagent_wake: "off"`: no wake anywhere, the child holds the exit notice as an observation;
 * - the monitor exits while the subagent is still working (the root waits on `task`): the notice
 *   waits for the root's turn to end, and is not answered inside the child.
 * Each test takes about 15–30 s.
 */
import { expect, test } from "bun:test"
import { exitReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import type { LiveProject } from "../src/monitor-qa.ts"
import {
  after,
  explained,
  isAssistant,
  planPrompt,
  waitForEnvelope,
  waitForReply,
  waitForWake,
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { textOf, waitFor, waitForIdle } from "../src/timeline.ts"

// One server; each test is a project of it with its own plugin options.
const shared = serverPerFile()

const LABEL = "child-server"

function rootPrompt(childSteps: Array<[string, Record<string, unknown>]>): string {
  const child = planPrompt("Start the server for the root.", childSteps, "Child started the server.")
  return planPrompt(
    "Start the server through a subagent.",
    [["task", { description: "start the server", prompt: child, subagent_type: "general" }]],
    "Delegated the server start.",
  )
}

async function delegate(live: LiveProject, childSteps: Array<[string, Record<string, unknown>]>) {
  const rootID = await live.newSession({ title: "root" })
  await live.prompt(rootID, rootPrompt(childSteps))
  const rootSaid = await waitForReply(
    live,
    rootID,
    "",
    (t) => t === "Delegated the server start.",
    "the root's turn",
    60_000,
  )
  const childID = await waitFor(
    async () => {
      const list = await live.server.client.session.list()
      return list.data?.find((s) => s.parentID === rootID)?.id
    },
    30_000,
    100,
    "the task tool's child session",
  )
  expect(live.model.scripted()[0]?.request.tools?.map((t) => t.function.name)).toContain("task")
  return { rootID, childID, rootSaid }
}

/** The child: its own plan, observations after it, never an answer to a monitor envelope. */
async function expectChildNeverWoken(live: LiveProject, childID: string, statuses: string[]) {
  const messages = await live.messages(childID)
  const envelopes = await live.envelopes(childID)
  expect(envelopes.map((e) => e.status)).toEqual(statuses)
  const said = messages.find((m) => isAssistant(m) && textOf(m) === "Child started the server.")
  expect(said).toBeDefined()
  expect(after(messages, said?.info.id ?? "").filter(isAssistant)).toEqual([])
  expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
  expect(live.pluginLog().join("\n")).not.toMatch(new RegExp(`sessionID=${childID} .*shouldReply=true`))
}

test("task tool, default: the subagent's exit notice wakes the root, attributed, with one REPORT turn", async () => {
  const live = await shared.project({ pluginOptions: { flush_interval_ms: 250 } })
  const { rootID, childID, rootSaid } = await delegate(live, [
    ["monitor_start", { command: "echo CHILD_STARTED; sleep 4; exit 9", label: LABEL }],
  ])
  const { envelope: notice, reply: report } = await waitForWake(
    live,
    rootID,
    (e) => e.status !== "running",
    (t) => t.includes("exit code 9"),
    "the exit notice in the root",
  )
  await waitForIdle(live.server.client, childID, 30_000, { busyGraceMs: 0 })

  await explained(live, { root: rootID, child: childID }, async () => {
    expect(notice.text).toContain(`\nsubagent_session: ${childID}\n`)
    expect(notice.text).toContain(`command_label: ${LABEL}\n`)
    expect(notice.status).toBe("exited (code=9)")
    expect((await live.envelopes(rootID)).map((e) => e.status)).toEqual(["exited (code=9)"])
    // The notice came after the root's own turn, and exactly one turn answered it.
    const root = await live.messages(rootID)
    expect(root.findIndex((m) => m.info.id === notice.message.info.id)).toBeGreaterThan(
      root.findIndex((m) => m.info.id === rootSaid.info.id),
    )
    expect(after(root, notice.message.info.id).map((m) => m.info.id)).toEqual([report.info.id])
    expect(textOf(report)).toBe(exitReport({ monitorId: notice.monitorId, label: LABEL, status: "exited (code=9)" }))
    expect([notice.message.info.agent, report.info.mode]).toEqual(["build", "build"])
    await expectChildNeverWoken(live, childID, ["running"])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 150_000)

test('task tool, subagent_wake "off": nobody is woken, the child holds the exit notice as an observation', async () => {
  const live = await shared.project({ pluginOptions: { flush_interval_ms: 250, subagent_wake: "off" } })
  const { rootID, childID } = await delegate(live, [
    ["monitor_start", { command: "echo CHILD_STARTED; sleep 4; exit 9", label: LABEL }],
  ])
  await waitForEnvelope(live, childID, (e) => e.status !== "running", "the exit notice in the child", 60_000)
  await waitForIdle(live.server.client, childID, 30_000, { busyGraceMs: 0 })
  await waitForIdle(live.server.client, rootID, 30_000, { busyGraceMs: 0 })

  await explained(live, { root: rootID, child: childID }, async () => {
    // The terminal batch had one route, the child, and it was sent there as an observation.
    const log = live.pluginLog().join("\n")
    expect(log).toMatch(new RegExp(`"sent monitor output" sessionID=${childID} .*shouldReply=false`))
    expect(log).not.toContain(rootID)
    expect(await live.envelopes(rootID)).toEqual([])
    await expectChildNeverWoken(live, childID, ["running", "exited (code=9)"])
    // Root: its delegation turn only (two steps); child: its two steps. No model call for a wake.
    expect(live.model.scripted()).toHaveLength(4)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 150_000)

test("task tool: a monitor that exits while the subagent still works wakes the root only after the root's turn", async () => {
  const live = await shared.project({ pluginOptions: { flush_interval_ms: 250 } })
  const { rootID, childID, rootSaid } = await delegate(live, [
    ["monitor_start", { command: "echo CHILD_STARTED; sleep 1; exit 9", label: LABEL }],
    ["bash", { command: "sleep 6", description: "more work" }],
  ])
  const { envelope: notice, reply: report } = await waitForWake(
    live,
    rootID,
    (e) => e.status !== "running",
    (t) => t.includes("exit code 9"),
    "the exit notice in the root",
  )
  await waitForIdle(live.server.client, childID, 30_000, { busyGraceMs: 0 })

  await explained(live, { root: rootID, child: childID }, async () => {
    const root = await live.messages(rootID)
    // The process ended during the task call; the notice still came after the root's turn ended.
    const rootDone = rootSaid.info as { time: { completed?: number } }
    expect(notice.message.info.time.created).toBeGreaterThanOrEqual(rootDone.time.completed ?? Number.POSITIVE_INFINITY)
    expect(after(root, rootSaid.info.id).map((m) => m.info.id)).toEqual([notice.message.info.id, report.info.id])
    expect(notice.text).toContain(`\nsubagent_session: ${childID}\n`)
    expect(textOf(report)).toBe(exitReport({ monitorId: notice.monitorId, label: LABEL, status: "exited (code=9)" }))
    await expectChildNeverWoken(live, childID, ["running"])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 150_000)
