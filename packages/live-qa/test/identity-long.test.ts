// test-runner: about 68 s (scripts/test.ts starts the longest first)
/**
 * A wake keeps the identity: a `plan` session on mock/m2, then 120+ observations (beyond twice the 60
 * newest messages a history read returns), then the exit wake. The REPORT turn runs as `plan` on
 * mock/m2: the identity of the person's message is kept however far back it is. Each line is printed
 * once the one before it was delivered (the command reads a line of a FIFO the test writes), so each
 * is its own observation on any machine, as fast as the session takes them.
 */
import { afterEach, expect, test } from "bun:test"
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { exitReport, OBSERVATION_ANSWERED } from "../src/monitor-agent.ts"
import { type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import {
  deliveriesLogged,
  explained,
  isAssistant,
  isRealUser,
  planPrompt,
  waitForEnvelope,
  waitForReply,
} from "../src/scenario.ts"
import { textOf, waitForIdle } from "../src/timeline.ts"
import { waitFor } from "../src/wait.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})

const M2 = { providerID: "mock", modelID: "m2" }
// Twice the 60 newest messages a history read returns, and a margin.
const LINES = 140

test("identity: after 120 observations the wake still runs as plan on the person's model", async () => {
  const live = await startMonitorQA({
    // One line per batch, sent as fast as the session allows, so each line is its own observation.
    pluginOptions: {
      flush_interval_ms: 250,
      batch_max_lines: 1,
      post_dispatch_hold_ms: 1,
      pending_retry_ms: 100,
      // This run needs 120 observations after the person's message: the observation budget
      // (tested on its own in budget.test.ts) would rightly hold most of them back.
      observation_bytes_per_minute: 10_000_000,
      observation_burst_bytes: 10_000_000,
      observation_session_bytes: 10_000_000,
    },
    config: {
      provider: { mock: { models: { m2: { name: "m2", tool_call: true, limit: { context: 128000, output: 4096 } } } } },
    },
  })
  qa = live
  const sessionID = await live.newSession()
  // Line i+1 comes once the test saw line i delivered and wrote a line to the gate: the command
  // blocks on it instead of polling (50 `sleep` processes a second).
  const dir = mkdtempSync(join(tmpdir(), "omo-identity-"))
  const gate = join(dir, "gate")
  if (Bun.spawnSync({ cmd: ["mkfifo", gate] }).exitCode !== 0) throw new Error(`mkfifo ${gate} failed`)
  const command = `exec 3<>${gate}; for i in $(seq 1 ${LINES}); do echo obs-$i; read -r _ <&3; done; exit 4`
  await live.prompt(
    sessionID,
    planPrompt("Plan while it runs.", [["monitor_start", { command, label: "long" }]], "Planning while it runs."),
    { agent: "plan", model: M2 },
  )
  for (let line = 1; line <= LINES; line++) {
    await waitFor(() => deliveriesLogged(live).size >= line, 60_000, 20, `observation ${line} delivered`)
    // Non-blocking: with the command gone (no reader), this throws instead of waiting forever.
    const fd = openSync(gate, constants.O_WRONLY | constants.O_NONBLOCK)
    writeSync(fd, "\n")
    closeSync(fd)
  }
  const wake = await waitForEnvelope(live, sessionID, (e) => e.status !== "running", "the exit notice", 60_000)
  rmSync(dir, { recursive: true, force: true })
  const reply = await waitForReply(
    live,
    sessionID,
    wake.message.info.id,
    (t) => t.includes("exit code 4"),
    "the report",
    60_000,
  )
  await waitForIdle(live.server.client, sessionID, 30_000, { busyGraceMs: 0 })

  await explained(live, { session: sessionID }, async () => {
    const messages = await live.messages(sessionID)
    const envelopes = await live.envelopes(sessionID)
    const observations = envelopes.filter((e) => e.status === "running")
    console.log(`IDENTITY-RUN observations=${observations.length} messages=${messages.length}`)
    expect(observations.length).toBeGreaterThanOrEqual(120)
    // Only one message was typed, long before the wake: more than twice 60 messages lie between.
    expect(messages.filter(isRealUser)).toHaveLength(1)
    expect(messages.findIndex((m) => m.info.id === wake.message.info.id)).toBeGreaterThan(120)
    for (const e of envelopes) expect([e.message.info.agent, e.message.info.model]).toEqual(["plan", M2])
    expect([reply.info.mode, reply.info.providerID, reply.info.modelID]).toEqual(["plan", "mock", "m2"])
    expect(textOf(reply)).toBe(exitReport({ monitorId: wake.monitorId, label: "long", status: "exited (code=4)" }))
    expect(messages.filter(isAssistant).map((m) => m.info.modelID)).toEqual(["m2", "m2", "m2"])
    expect(messages.some((m) => textOf(m).includes(OBSERVATION_ANSWERED))).toBe(false)
    expect((await live.stop()).leftovers).toEqual([])
  })
}, 300_000)
