/**
 * The load-time check of opencode's API, live: the real entry behind a wrapper that hides
 * `client.session.status` from opencode's plugin input (src/hidden-api-plugin.ts). No monitor tool
 * reaches the model, the server log and a toast name the missing API and the tested releases, and
 * opencode keeps working.
 */
import { afterEach, expect, test } from "bun:test"
import { resolve } from "node:path"
import { type MonitorQA, startMonitorQA, toolNamesSeen } from "../src/monitor-qa.ts"
import { lastAssistant, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})

test("an opencode without session status: no tools, and the log and a toast name the API and the tested releases", async () => {
  qa = await startMonitorQA({
    pluginSpec: resolve(import.meta.dir, "../src/hidden-api-plugin.ts"),
    pluginOptions: { hide: "session.status" },
  })
  const sessionID = await qa.newSession()
  await qa.prompt(sessionID, "hello")
  await waitForIdle(qa.server.client, sessionID, 30_000)

  expect(toolNamesSeen(qa.model)).toEqual([])
  expect(textOf(lastAssistant(await qa.messages(sessionID)))).toBe("ok")
  const expected =
    "opencode-monitor (server part) is disabled: this opencode lacks client.session.status (session status). " +
    "It is tested on opencode 1.18.32–1.18.33 (opencode 1.x)"
  const line = qa.server.logs.map((l) => l.text).find((l) => l.includes("is disabled: this opencode lacks"))
  console.log(`server log: ${line}`)
  expect(line).toContain(expected)
  const toast = await waitFor(
    () => qa?.timeline.events.find((e) => e.type === "tui.toast.show"),
    10_000,
    50,
    "the toast",
  )
  console.log(`toast: ${JSON.stringify(toast.properties)}`)
  expect(JSON.stringify(toast.properties)).toContain(expected)
  expect((await qa.stop()).leftovers).toEqual([])
}, 60_000)
