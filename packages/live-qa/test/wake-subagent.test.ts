// test-runner: about 45 s (scripts/test.ts starts the longest first)
/**
 * Match wake, subagent: a wake_pattern match in a monitor a subagent (child session) started.
 * The child is never woken by it: it gets the line as an observation either way. With
 * subagent_wake "off" nothing reaches the root session; by default ("parent") the match wake is
 * routed to the root session like an exit notice, naming the child, and the root's agent answers
 * it. About 20–30 s per test; each test starts its own server.
 */
import { expect, test } from "bun:test"
import { matchReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
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
} from "../src/scenario.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { sleep, textOf, waitForIdle } from "../src/timeline.ts"

// One server; each test is a project of it with its own plugin options.
const shared = serverPerFile()

const CHILD_PROMPT = planPrompt(
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
async function parentAndChild(live: LiveProject) {
  const { parentID, childID } = await parentWithChild(live, CHILD_PROMPT)
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
async function expectChildObservesOnly(live: LiveProject, childID: string, inChild: Envelope) {
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
  const { parentID, childID, inChild } = await parentAndChild(live)
  await sleep(3_000) // longer than pending_retry_ms and the hold: time for a wrong delivery to show

  await explained(live, { parent: parentID, child: childID }, async () => {
    await expectChildObservesOnly(live, childID, inChild)
    const parent = await live.messages(parentID)
    expect(parent.map((m) => [m.info.role, textOf(m)])).toEqual(PARENT_OWN_TURN)
    expect(live.pluginLog().join("\n")).not.toContain(parentID)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 120_000)

test("subagent match, default subagent_wake (parent): the match wake goes to the root, names the child, and is answered there", async () => {
  const live = await shared.project()
  const { parentID, childID, inChild } = await parentAndChild(live)
  const wake = await waitForEnvelope(live, parentID, (e) => e.status === "running", "the match wake in the root")
  const reply = await waitForReply(
    live,
    parentID,
    wake.message.info.id,
    (t) => t.startsWith("REPORT:"),
    "the root's REPORT",
  )
  await waitForIdle(live.server.client, parentID, 30_000, { busyGraceMs: 0 })

  await explained(live, { parent: parentID, child: childID }, async () => {
    await expectChildObservesOnly(live, childID, inChild)
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
