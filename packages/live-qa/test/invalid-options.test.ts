/**
 * An invalid option in opencode.json disables the plugin loudly: no monitor tools reach the model,
 * the server log and a toast name the key, the bound and the value, and opencode keeps working.
 */
import { afterEach, expect, test } from "bun:test"
import { type MonitorQA, startMonitorQA, toolNamesSeen } from "../src/monitor-qa.ts"
import { lastAssistant, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})

test("an invalid option registers no tools and says which key, bound and value", async () => {
  qa = await startMonitorQA({ pluginOptions: { max_monitors_per_session: 99 } })
  const sessionID = await qa.newSession()
  await qa.prompt(sessionID, "hello")
  await waitForIdle(qa.server.client, sessionID, 30_000)

  expect(toolNamesSeen(qa.model)).toEqual([])
  expect(textOf(lastAssistant(await qa.messages(sessionID)))).toBe("ok")
  const expected = "max_monitors_per_session must be <= 16 (got 99)"
  expect(qa.pluginLog().some((line) => line.includes(expected))).toBe(true)
  const toast = await waitFor(
    () => qa?.timeline.events.find((e) => e.type === "tui.toast.show"),
    10_000,
    50,
    "the toast",
  )
  expect(JSON.stringify(toast.properties)).toContain(expected)
  expect((await qa.stop()).leftovers).toEqual([])
}, 60_000)
