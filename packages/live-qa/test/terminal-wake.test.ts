// test-runner: about 33 s (scripts/test.ts starts the longest first)
/**
 * Scenario 1, the seed's QA against a real opencode serve: a command prints one line, goes quiet,
 * exits 7. The observation lands without an assistant turn; the terminal batch lands and, with no
 * human input, the agent reports exit code 7; the session ends idle.
 */
import { afterEach, expect, test } from "bun:test"
import { exitReport, OBSERVATION_ANSWERED, QA_PROMPT } from "../src/monitor-agent.ts"
import { MONITOR_TOOLS, type MonitorQA, startMonitorQA, toolNamesSeen } from "../src/monitor-qa.ts"
import { textOf, waitFor, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})

test("terminal wake: the session wakes on exit code 7 with no human input", async () => {
  qa = await startMonitorQA()
  const sessionID = await qa.newSession()
  await qa.prompt(sessionID, QA_PROMPT)

  // The terminal envelope arrives by itself, then an assistant turn that answers it.
  const wake = await waitFor(
    async () => (await qa?.envelopes(sessionID))?.find((e) => e.status !== "running"),
    30_000,
    100,
    "the terminal envelope",
  )
  await waitFor(
    async () => {
      const messages = (await qa?.messages(sessionID)) ?? []
      const after = messages.slice(messages.findIndex((m) => m.info.id === wake.message.info.id) + 1)
      return after.find((m) => m.info.role === "assistant" && m.info.time.completed)
    },
    30_000,
    100,
    "the assistant turn after the wake",
  )
  await waitForIdle(qa.server.client, sessionID, 30_000, { busyGraceMs: 0 })

  expect(toolNamesSeen(qa.model)).toEqual(MONITOR_TOOLS)
  const messages = await qa.messages(sessionID)
  const envelopes = await qa.envelopes(sessionID)
  expect(envelopes.map((e) => [e.batch, e.status])).toEqual([
    [1, "running"],
    [2, "exited (code=7)"],
  ])
  expect(envelopes[0]?.text).toContain("[stdout seq=1] QA_BUILD_LINE")
  // opencode stores what each envelope says as data, beside its text: the wake's note has its status.
  expect(envelopes.map((e) => [e.note.wake, e.note.status])).toEqual([
    [false, { kind: "running" }],
    [true, { kind: "exited", code: 7 }],
  ])
  expect(envelopes.every((e) => e.message.parts.every((p) => p.type !== "text" || p.synthetic === true))).toBe(true)

  // Batch 1 is an observation: no assistant turn between it and batch 2.
  const index = (id: string) => messages.findIndex((m) => m.info.id === id)
  const first = index(envelopes[0]?.message.info.id ?? "")
  const second = index(envelopes[1]?.message.info.id ?? "")
  expect(messages.slice(first + 1, second).filter((m) => m.info.role === "assistant")).toEqual([])

  // Batch 2 woke the session: the next assistant turn reports code 7, and it is the last message.
  const after = messages.slice(second + 1)
  expect(after.map((m) => m.info.role)).toEqual(["assistant"])
  const monitorId = envelopes[1]?.monitorId ?? ""
  expect(textOf(after[0])).toBe(exitReport({ monitorId, label: "qa-build", status: "exited (code=7)" }))
  expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
  // No human input after the first prompt: exactly one real user message.
  expect(
    messages.filter((m) => m.info.role === "user" && m.parts.some((p) => p.type === "text" && !p.synthetic)),
  ).toHaveLength(1)

  // The plugin's log names each dispatch with its decision fields.
  const log = qa.pluginLog().join("\n")
  expect(log).toMatch(/"sent monitor output".*batchSeq=1 .*shouldReply=false forceActiveDispatch=false/)
  expect(log).toMatch(/"sent monitor output".*batchSeq=2 .*shouldReply=true forceActiveDispatch=false/)
  expect(log).toContain(`source=monitor-output:${monitorId}:batch-2`)
  expect((await qa.stop()).leftovers).toEqual([])
}, 90_000)
