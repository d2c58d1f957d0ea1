/** Wire-format checks for the scripted model, without opencode (fast). */
import { afterAll, describe, expect, test } from "bun:test"
import { lastUserText, startScriptedModel } from "../src/scripted-model.ts"

const model = startScriptedModel((request) => {
  const text = lastUserText(request)
  if (text === "tool") return { toolCalls: [{ name: "probe", arguments: { a: 1 } }] }
  if (text === "slow") return { text: "late", delayMs: 300 }
  if (text === "boom") throw new Error("scripted failure")
  return { text: `echo ${text}` }
})
afterAll(() => model.stop())

const tools = [{ type: "function", function: { name: "probe", parameters: { type: "object" } } }]

async function post(body: Record<string, unknown>): Promise<Response> {
  return fetch(`${model.baseURL}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  })
}

interface Completion {
  choices: { message: { content: string | null } }[]
}

async function completion(response: Response): Promise<Completion> {
  return (await response.json()) as Completion
}

async function sseData(response: Response): Promise<string[]> {
  const text = await response.text()
  return text
    .split("\n\n")
    .filter((frame) => frame.startsWith("data: "))
    .map((frame) => frame.slice(6))
}

describe("scripted model", () => {
  test("streams text deltas, stop, then [DONE]", async () => {
    const response = await post({
      model: "m",
      stream: true,
      tools,
      messages: [{ role: "user", content: "one two three four" }],
    })
    expect(response.headers.get("content-type")).toContain("text/event-stream")
    const data = await sseData(response)
    expect(data[data.length - 1]).toBe("[DONE]")
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d))
    const text = chunks.map((c) => c.choices[0].delta.content ?? "").join("")
    expect(text).toBe("echo one two three four")
    expect(chunks.length).toBeGreaterThan(3)
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe("stop")
  })

  test("streams tool_calls with finish_reason tool_calls", async () => {
    const data = await sseData(
      await post({
        model: "m",
        stream: true,
        tools,
        messages: [{ role: "user", content: [{ type: "text", text: "tool" }] }],
      }),
    )
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d))
    const call = chunks.find((c) => c.choices[0].delta.tool_calls)?.choices[0].delta.tool_calls[0]
    expect(call.function.name).toBe("probe")
    expect(JSON.parse(call.function.arguments)).toEqual({ a: 1 })
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe("tool_calls")
  })

  test("non-streaming, toolless default, delay, script errors, recording", async () => {
    const plain = await completion(await post({ model: "m", tools, messages: [{ role: "user", content: "x" }] }))
    expect(plain.choices[0]?.message.content).toBe("echo x")

    const title = await completion(await post({ model: "m", messages: [{ role: "user", content: "make a title" }] }))
    expect(title.choices[0]?.message.content).toBe("Scripted title")

    const started = Date.now()
    await sseData(await post({ model: "m", stream: true, tools, messages: [{ role: "user", content: "slow" }] }))
    expect(Date.now() - started).toBeGreaterThanOrEqual(280)

    const failed = await post({ model: "m", tools, messages: [{ role: "user", content: "boom" }] })
    expect(failed.status).toBe(400)

    expect(model.requests.filter((r) => r.toolless)).toHaveLength(1)
    expect(model.requests.at(-1)?.error).toBe("scripted failure")
    expect(model.requests.every((r) => typeof r.at === "number")).toBe(true)
  })
})
