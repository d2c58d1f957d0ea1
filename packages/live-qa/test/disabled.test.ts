// test-runner: about 40 s (scripts/test.ts starts the longest first)
/**
 * The plugin disables itself loudly, live, and opencode keeps working: no monitor tool reaches the
 * model, and the server log and a toast say why —
 * (1) an invalid option in opencode.json: the key, the bound and the value;
 * (2) the load-time check of opencode's API: the real entry behind a wrapper that hides
 *     `client.session.status` from opencode's plugin input (src/hidden-api-plugin.ts); the missing
 *     API and the tested releases.
 * Each test is a project of one shared server (a project costs the server about a third of a
 * server of its own).
 */
import { expect, test } from "bun:test"
import { resolve } from "node:path"
import { toolNamesSeen } from "../src/monitor-qa.ts"
import { serverPerFile } from "../src/server-per-file.ts"
import { lastAssistant, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

const shared = serverPerFile()

test("an invalid option registers no tools and says which key, bound and value", async () => {
  const qa = await shared.project({ pluginOptions: { max_monitors_per_session: 99 } })
  const sessionID = await qa.newSession()
  await qa.prompt(sessionID, "hello")
  await waitForIdle(qa.server.client, sessionID, 30_000)

  expect(toolNamesSeen(qa.model)).toEqual([])
  expect(textOf(lastAssistant(await qa.messages(sessionID)))).toBe("ok")
  const expected = "max_monitors_per_session must be <= 16 (got 99)"
  expect(qa.pluginLog().some((line) => line.includes(expected))).toBe(true)
  const toast = await waitFor(
    () => qa.timeline.events.find((e) => e.type === "tui.toast.show"),
    10_000,
    50,
    "the toast",
  )
  expect(JSON.stringify(toast.properties)).toContain(expected)
  expect((await qa.stop()).leftovers).toEqual([])
}, 60_000)

test("an opencode without session status: no tools, and the log and a toast name the API and the tested releases", async () => {
  const qa = await shared.project({
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
    () => qa.timeline.events.find((e) => e.type === "tui.toast.show"),
    10_000,
    50,
    "the toast",
  )
  console.log(`toast: ${JSON.stringify(toast.properties)}`)
  expect(JSON.stringify(toast.properties)).toContain(expected)
  expect((await qa.stop()).leftovers).toEqual([])
}, 60_000)
