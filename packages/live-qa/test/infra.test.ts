// test-runner: about 48 s (scripts/test.ts starts the longest first)
/**
 * Proves the harness against a real `opencode serve`: a plain text turn and a
 * turn where the scripted model calls the built-in bash tool. Both must leave
 * no process behind.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { type OpencodeServer, type StopReport, startOpencode } from "../src/opencode-server.ts"
import { type Script, type ScriptedModel, startScriptedModel, toolResults } from "../src/scripted-model.ts"
import {
  getMessages,
  lastAssistant,
  renderMessages,
  startTimeline,
  type TimelineRecorder,
  textOf,
  waitForIdle,
} from "../src/timeline.ts"

interface Harness {
  model: ScriptedModel
  server: OpencodeServer
  timeline: TimelineRecorder
}

let current: Harness | undefined

async function setUp(script: Script, permission?: Record<string, unknown>): Promise<Harness> {
  const model = startScriptedModel(script)
  const spawnAt = Date.now()
  const server = await startOpencode({ modelBaseURL: model.baseURL, permission })
  console.log(`[infra] server listening after ${server.startupMs} ms (startOpencode total ${Date.now() - spawnAt} ms)`)
  const timeline = await startTimeline(server)
  current = { model, server, timeline }
  return current
}

async function tearDown(h: Harness): Promise<StopReport> {
  await h.timeline.stop()
  const report = await h.server.stop()
  await h.model.stop()
  return report
}

afterEach(async () => {
  // Safety net for a failed assertion: never leave a server running.
  if (current) await tearDown(current).catch(() => undefined)
  current = undefined
})

async function newSession(h: Harness): Promise<string> {
  // A title skips title generation, so the small model is never called.
  const created = await h.server.client.session.create({ body: { title: "infra test" } })
  if (!created.data) throw new Error(`session.create failed: ${JSON.stringify(created.error)}`)
  return created.data.id
}

async function prompt(h: Harness, sessionID: string, text: string): Promise<number> {
  const sentAt = Date.now()
  const result = await h.server.client.session.promptAsync({
    path: { id: sessionID },
    body: { agent: "build", model: { providerID: "mock", modelID: "m" }, parts: [{ type: "text", text }] },
  })
  expect(result.response.status).toBe(204)
  return sentAt
}

function expectClean(report: StopReport): void {
  expect(report.disposeOk).toBe(true)
  expect(report.leftovers).toEqual([])
}

describe("live harness against real opencode", () => {
  test("text answer round trip", async () => {
    const h = await setUp(() => ({ text: "Hello from the scripted model.\nSecond line." }))
    const sessionID = await newSession(h)
    const sentAt = await prompt(h, sessionID, "say hello")
    await waitForIdle(h.server.client, sessionID, 30_000)
    const idleAt = Date.now()

    const messages = await getMessages(h.server.client, sessionID)
    const reply = lastAssistant(messages)
    console.log(
      `[infra] first prompt → idle in ${idleAt - sentAt} ms; model called after ${(h.model.requests[0]?.at ?? 0) - sentAt} ms`,
    )
    console.log(renderMessages(messages))

    expect(reply?.info.finish).toBe("stop")
    expect(textOf(reply)).toBe("Hello from the scripted model.\nSecond line.")
    expect(h.model.scripted()).toHaveLength(1)
    expect(h.model.requests.filter((r) => r.toolless)).toHaveLength(0)
    expect(h.timeline.events.some((e) => e.type === "session.idle" && e.sessionID === sessionID)).toBe(true)

    current = undefined
    expectClean(await tearDown(h))
  })

  test("scripted model drives the built-in bash tool", async () => {
    const script: Script = (request) => {
      const results = toolResults(request)
      if (results.length > 0) return { text: `bash said: ${results[0]?.text.trim()}` }
      return { toolCalls: [{ name: "bash", arguments: { command: "echo hi", description: "Print hi" } }] }
    }
    const h = await setUp(script, { bash: "allow" })
    const sessionID = await newSession(h)
    const sentAt = await prompt(h, sessionID, "run echo hi")
    await waitForIdle(h.server.client, sessionID, 30_000)
    console.log(`[infra] bash turn → idle in ${Date.now() - sentAt} ms`)

    const messages = await getMessages(h.server.client, sessionID)
    console.log(renderMessages(messages))
    const assistants = messages.filter((m) => m.info.role === "assistant")
    expect(assistants.map((m) => m.info.finish)).toEqual(["tool-calls", "stop"])
    const toolPart = assistants[0]?.parts.find((p) => p.type === "tool")
    expect(toolPart?.tool).toBe("bash")
    expect(toolPart?.state?.status).toBe("completed")
    expect(toolPart?.state?.output?.trim()).toBe("hi")
    expect(textOf(assistants[1])).toBe("bash said: hi")

    // The second model call must have seen the tool result.
    const second = h.model.scripted()[1]
    expect(second && toolResults(second.request)[0]?.text.trim()).toBe("hi")
    expect(h.timeline.events.some((e) => e.type === "message.part.updated")).toBe(true)

    current = undefined
    expectClean(await tearDown(h))
  })
})
