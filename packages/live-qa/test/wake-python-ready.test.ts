/**
 * Streaming runtimes stream: `python3 -m http.server` prints `Serving HTTP on …` once it listens,
 * and a readiness `wake_pattern` on that line must wake the session while the server runs. Python
 * block-buffers stdout when it is a pipe, so without a per-line switch in the command's
 * environment the line would stay in Python's buffer for as long as the server runs and the
 * wake would never come. The server is stopped by the agent afterwards and must be gone.
 * The opencode server's environment (live-qa's isolated one) has no PYTHONUNBUFFERED of its own.
 * About 20-30 s on an idle 2-core machine.
 */
import { afterEach, expect, test } from "bun:test"
import { connect } from "node:net"
import { freePort } from "../src/free-port.ts"
import type { Envelope, MonitorQA } from "../src/monitor-qa.ts"
import { startMonitorQA } from "../src/monitor-qa.ts"
import { explained, planPrompt, waitForReply, waitForWake } from "../src/scenario.ts"
import { waitFor, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
}, 30_000)

const isMatchWake = (e: Envelope) => e.status === "running" && /\nwake: line/.test(e.text)

/** True when something accepts a TCP connection on 127.0.0.1:port (nothing is sent: no request log line). */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" })
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })
}

test("python3 -m http.server: the readiness line wakes the session while the server runs", async () => {
  const live = await startMonitorQA()
  qa = live
  const port = await freePort()
  const sessionID = await live.newSession()
  await live.prompt(
    sessionID,
    planPrompt(
      "Serve the folder and tell me when it is up.",
      [
        [
          "monitor_start",
          {
            command: `python3 -m http.server ${port} --bind 127.0.0.1`,
            label: "web",
            wake_pattern: "Serving HTTP",
          },
        ],
      ],
      "Starting the server; I will report when it is up.",
    ),
  )
  // The server listens (Python prints the line right after it binds) ...
  await waitFor(async () => ((await listening(port)) ? true : undefined), 30_000, 100, "the server listening")
  const listenedAt = Date.now()
  // ... and the line that says so wakes the session, within seconds, while it still runs.
  const { envelope: wake, reply } = await explained(live, { web: sessionID }, () =>
    waitForWake(
      live,
      sessionID,
      isMatchWake,
      (t) => t.startsWith("REPORT:"),
      "the readiness wake while the server listens",
      15_000,
    ),
  )

  console.log(
    `the readiness wake was created ${wake.message.info.time.created - listenedAt} ms after the test saw the port listening (polled every 100 ms)`,
  )

  await explained(live, { web: sessionID }, async () => {
    expect(wake.text).toMatch(
      new RegExp(
        `\\n\\[stdout seq=\\d+\\] Serving HTTP on 127\\.0\\.0\\.1 port ${port} \\(http://127\\.0\\.0\\.1:${port}/\\)`,
      ),
    )
    expect(reply.info.parentID).toBe(wake.message.info.id)
    expect(await listening(port)).toBe(true)
  })

  // The agent stops it: the port is free again and nothing is left behind.
  await live.prompt(
    sessionID,
    planPrompt("Stop the server.", [["monitor_stop", { monitor_id: wake.monitorId }]], "Stopped the server."),
  )
  await waitForReply(live, sessionID, reply.info.id, (t) => t === "Stopped the server.", "the stop answer")
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  await explained(live, { web: sessionID }, async () => {
    expect(await listening(port)).toBe(false)
    expect((await live.envelopes(sessionID)).filter(isMatchWake).map((e) => e.batch)).toEqual([wake.batch])
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 150_000)
