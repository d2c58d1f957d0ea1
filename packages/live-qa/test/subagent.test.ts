// test-runner: about 90 s (scripts/test.ts starts the longest first)
/**
 * Scenario 5: a monitor started in a child (subagent) session, created here directly with a
 * parentID after the parent finished its own turn (the `task` tool's path is in
 * subagent-task.test.ts). By default (subagent_wake: "parent") the child gets the observations and
 * the exit notice lands in the root session instead, naming the child, and wakes it. With
 * subagent_wake: "off" the child keeps the exit notice as an observation and nothing reaches the
 * parent. The same for a wake_pattern match in a monitor the child started: the child gets the
 * line as an observation either way; with subagent_wake "off" nothing reaches the root session, by
 * default the match wake is routed to the root like an exit notice, naming the child, and the
 * root's agent answers it. Each test takes about 10–30 s; each is a project of one shared server.
 */
import { expect, test } from "bun:test"
import { exitReport, matchReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import type { Envelope, LiveProject } from "../src/monitor-qa.ts"
import {
  after,
  explained,
  isAssistant,
  PARENT_OWN_TURN,
  parentWithChild,
  planPrompt,
  waitForEnvelope,
  waitForReply,
  waitForWake,
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { sleep, textOf, waitForIdle } from "../src/timeline.ts"

// One server; each test is a project of it with its own plugin options.
const shared = serverPerFile()

const CHILD_PROMPT = planPrompt(
  "Run the job for the parent.",
  [["monitor_start", { command: "echo child-line; sleep 1; exit 6", label: "child-job" }]],
  "Child started the job.",
)

/** A parent with one finished turn of its own, and a child of it that starts the monitor. */
async function parentAndChild(live: LiveProject) {
  const { parentID, childID } = await parentWithChild(live, CHILD_PROMPT)
  await waitForEnvelope(live, childID, (e) => e.status === "running", "the child's observation")
  return { parentID, childID }
}

/** The child is never woken: observations only (the exit notice too when it stays there), never answered. */
async function expectChildObservesOnly(live: LiveProject, childID: string, statuses: string[]) {
  const messages = await live.messages(childID)
  const envelopes = await live.envelopes(childID)
  expect(envelopes.map((e) => e.status)).toEqual(statuses)
  expect(envelopes[0]?.text).toContain("[stdout seq=1] child-line")
  for (const e of envelopes) expect(e.text).not.toContain("subagent_session:")
  // The child's turn ended with its plan; the envelopes came after, and no assistant followed.
  const said = messages.find((m) => isAssistant(m) && textOf(m) === "Child started the job.")
  expect(after(messages, said?.info.id ?? "").map((m) => m.info.id)).toEqual(envelopes.map((e) => e.message.info.id))
  expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
  expect(live.pluginLog().join("\n")).not.toMatch(new RegExp(`sessionID=${childID} .*shouldReply=true`))
}

test('subagent, subagent_wake "off": the child keeps the exit notice as an observation, and nothing reaches the parent', async () => {
  const live = await shared.project({ pluginOptions: { flush_interval_ms: 250, subagent_wake: "off" } })
  const { parentID, childID } = await parentAndChild(live)
  await waitForEnvelope(live, childID, (e) => e.status !== "running", "the child's terminal observation")
  await waitForIdle(live.server.client, childID, 30_000, { busyGraceMs: 0 })
  // The monitor is over and its last batch was delivered: the log says where it went.
  const log = () => live.pluginLog().join("\n")
  expect(log()).toMatch(new RegExp(`"sent monitor output" sessionID=${childID} .*batchSeq=2 .*shouldReply=false`))

  await explained(live, { parent: parentID, child: childID }, async () => {
    await expectChildObservesOnly(live, childID, ["running", "exited (code=6)"])
    // The parent still holds only its own turn.
    const parent = await live.messages(parentID)
    expect(parent.map((m) => [m.info.role, textOf(m)])).toEqual(PARENT_OWN_TURN)
    expect(log()).not.toContain(parentID)
    // The model was asked three times: the parent's turn and the child's two steps, never again.
    expect(live.model.scripted()).toHaveLength(3)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 90_000)

test("subagent, default: the exit notice wakes the root session and names the child; the child only observes", async () => {
  const live = await shared.project({ pluginOptions: { flush_interval_ms: 250 } })
  const { parentID, childID } = await parentAndChild(live)
  const notice = await waitForEnvelope(live, parentID, (e) => e.status !== "running", "the exit notice in the parent")
  const reply = await waitForReply(
    live,
    parentID,
    notice.message.info.id,
    (t) => t.includes("exit code 6"),
    "the parent's report",
  )
  await waitForIdle(live.server.client, parentID, 30_000, { busyGraceMs: 0 })

  await explained(live, { parent: parentID, child: childID }, async () => {
    await expectChildObservesOnly(live, childID, ["running"])
    // Only the exit notice reaches the parent, once, naming the child; the observation does not.
    const inParent = await live.envelopes(parentID)
    expect(inParent.map((e) => [e.monitorId, e.batch, e.status])).toEqual([[notice.monitorId, 2, "exited (code=6)"]])
    expect(notice.text).toContain(`\nsubagent_session: ${childID}\n`)
    expect(notice.text).toContain("command_label: child-job\n")
    expect(notice.message.parts.every((p) => p.type !== "text" || p.synthetic === true)).toBe(true)
    // The parent woke: its next turn answers the notice and reports code 6.
    const parent = await live.messages(parentID)
    expect(after(parent, notice.message.info.id).map((m) => m.info.id)).toEqual([reply.info.id])
    expect(reply.info.parentID).toBe(notice.message.info.id)
    expect(textOf(reply)).toBe(
      exitReport({ monitorId: notice.monitorId, label: "child-job", status: "exited (code=6)" }),
    )
    // The notice keeps the parent's own agent and model.
    expect([notice.message.info.agent, notice.message.info.model]).toEqual([
      "build",
      { providerID: "mock", modelID: "m" },
    ])
    const log = live.pluginLog().join("\n")
    expect(log).toMatch(new RegExp(`"sent monitor output" sessionID=${parentID} .*batchSeq=2 .*shouldReply=true`))
    expect(log).not.toMatch(new RegExp(`sessionID=${parentID} .*batchSeq=1 `))
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 90_000)

// Match wakes of a child's monitor.

const CHILD_SERVER_PROMPT = planPrompt(
  "Start the server for the parent.",
  [
    [
      "monitor_start",
      { command: "sleep 1; echo 'ready on :4400'; sleep 120", label: "child-srv", wake_pattern: "ready on" },
    ],
  ],
  "Child started the server.",
)

/** A parent with one finished turn of its own, and a child of it whose monitor prints the line. */
async function parentAndMatchingChild(live: LiveProject) {
  const { parentID, childID } = await parentWithChild(live, CHILD_SERVER_PROMPT)
  const inChild = await waitForEnvelope(
    live,
    childID,
    (e) => e.text.includes("ready on :4400"),
    "the matching line in the child",
  )
  await waitForIdle(live.server.client, childID, 30_000, { busyGraceMs: 0 })
  return { parentID, childID, inChild }
}

/** Either way the child gets the line as a plain observation, never a wake, never answered. */
async function expectChildObservesMatch(live: LiveProject, childID: string, inChild: Envelope) {
  expect(inChild.status).toBe("running")
  expect(inChild.text).not.toContain("\nwake: ")
  const messages = await live.messages(childID)
  const said = messages.find((m) => isAssistant(m) && textOf(m) === "Child started the server.")
  expect(after(messages, said?.info.id ?? "").filter(isAssistant)).toEqual([])
  expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
  expect(live.pluginLog().join("\n")).not.toMatch(new RegExp(`sessionID=${childID} .*shouldReply=true`))
}

test('subagent match, subagent_wake "off": the child observes the line, nothing reaches the root', async () => {
  const live = await shared.project({ pluginOptions: { subagent_wake: "off" } })
  const { parentID, childID, inChild } = await parentAndMatchingChild(live)
  await sleep(3_000) // longer than pending_retry_ms and the hold: time for a wrong delivery to show

  await explained(live, { parent: parentID, child: childID }, async () => {
    await expectChildObservesMatch(live, childID, inChild)
    const parent = await live.messages(parentID)
    expect(parent.map((m) => [m.info.role, textOf(m)])).toEqual(PARENT_OWN_TURN)
    expect(live.pluginLog().join("\n")).not.toContain(parentID)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 120_000)

test("subagent match, default subagent_wake (parent): the match wake goes to the root, names the child, and is answered there", async () => {
  const live = await shared.project()
  const { parentID, childID, inChild } = await parentAndMatchingChild(live)
  const { envelope: wake, reply } = await waitForWake(
    live,
    parentID,
    (e) => e.status === "running",
    (t) => t.startsWith("REPORT:"),
    "the match wake in the root",
  )

  await explained(live, { parent: parentID, child: childID }, async () => {
    await expectChildObservesMatch(live, childID, inChild)
    expect(wake.monitorId).toBe(inChild.monitorId)
    expect(wake.text).toContain(`\nsubagent_session: ${childID}\n`)
    expect(wake.text).toContain("\nwake: line matched wake_pattern (1 of 1) at seq=1\n")
    expect(wake.text).toContain("[stdout seq=1] ready on :4400")
    const parent = await live.messages(parentID)
    expect(after(parent, wake.message.info.id).map((m) => m.info.id)).toEqual([reply.info.id])
    expect(reply.info.parentID).toBe(wake.message.info.id)
    expect(textOf(reply)).toBe(
      matchReport({
        monitorId: wake.monitorId,
        label: "child-srv",
        wake: "wake: line matched wake_pattern (1 of 1) at seq=1",
        wakeLine: "ready on :4400",
      }),
    )
    expect([wake.message.info.agent, wake.message.info.model]).toEqual(["build", { providerID: "mock", modelID: "m" }])
    expect((await live.envelopes(parentID)).map((e) => e.batch)).toEqual([wake.batch])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 120_000)
