// test-runner: about 131 s (scripts/test.ts starts the longest first)
/**
 * Scenario: the observation budget on a real opencode serve, idle session.
 * 1. A dev server logging 10 lines a second for 5 minutes injects no more than the documented
 *    budget; the exit wake still comes with its last lines; monitor_output returns held-back lines.
 * 2. One ERROR line among 3 000 ordinary lines printed at once reaches the session.
 * One server per file, on the documented defaults run on a clock four times as fast: the flush
 * interval, the refill rate and the summary interval are scaled by 4 and the commands print 4
 * times as fast, so every batch, envelope and byte count is that of the 5-minute run at the
 * defaults (burst and session total unchanged), in 75 s. Figures are in the defaults' minutes.
 */
import { afterAll, beforeAll, expect, test } from "bun:test"
import { type Envelope, type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import { after, explained, isAssistant, planPrompt, waitForEnvelope, waitForReply } from "../src/scenario.ts"
import { textOf } from "../src/timeline.ts"

// The defaults in packages/opencode-monitor/src/config.ts (observation_*), as the README documents them.
const BYTES_PER_MINUTE = 4_096
const BURST_BYTES = 16_384
const SESSION_BYTES = 65_536
const SUMMARY_INTERVAL_MS = 300_000
const FLUSH_INTERVAL_MS = 1_000
/** How much faster than the defaults' clock this file runs. */
const SCALE = 4

let qa: MonitorQA
beforeAll(async () => {
  qa = await startMonitorQA({
    pluginOptions: {
      flush_interval_ms: FLUSH_INTERVAL_MS / SCALE,
      observation_bytes_per_minute: BYTES_PER_MINUTE * SCALE,
      observation_summary_interval_ms: SUMMARY_INTERVAL_MS / SCALE,
    },
  })
}, 120_000)
afterAll(async () => {
  await qa?.stop().catch(() => undefined)
}, 60_000)

/** A real duration in the defaults' minutes. */
const defaultMinutes = (ms: number) => (ms * SCALE) / 60_000
const PAUSE = 1 / SCALE

const REQUEST_LINE = "127.0.0.1 - - 'GET /api/items/$i HTTP/1.1' 200 512 3ms"
// 3 000 lines, 10 then a pause: 10 lines a second of the defaults' clock for 5 of its minutes.
const CHATTY = `i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo "${REQUEST_LINE}"; if [ $((i % 10)) -eq 0 ]; then sleep ${PAUSE}; fi; done; echo chatty-last-line; exit 3`
// 3 000 lines at once, one of them an error, then a quiet tail (25 s of the defaults' clock) before the exit.
const NEEDLE = "ERROR: lost connection to database (pool exhausted)"
const HAYSTACK = `i=0; while [ $i -lt 3000 ]; do i=$((i+1)); if [ $i -eq 1500 ]; then echo "${NEEDLE}"; else echo "${REQUEST_LINE}"; fi; done; sleep ${25 / SCALE}; exit 0`

const bytesOf = (envelopes: Envelope[]) => envelopes.reduce((n, e) => n + Buffer.byteLength(e.text), 0)
const seqsIn = (text: string) => [...text.matchAll(/^\[std(?:out|err) seq=(\d+)\]/gm)].map((m) => Number(m[1]))

test("a 10 lines/s monitor in an idle session stays within the budget for 5 minutes; the wake and monitor_output still work", async () => {
  const sessionID = await qa.newSession({ title: "budget chatty" })
  const startedAt = await qa.prompt(
    sessionID,
    planPrompt("Run the dev server.", [["monitor_start", { command: CHATTY, label: "chatty" }]], "Dev server started."),
  )
  await explained(qa, { chatty: sessionID }, async () => {
    const wake = await waitForEnvelope(qa, sessionID, (e) => e.status !== "running", "the exit wake", 240_000)
    const minutes = defaultMinutes(wake.message.info.time.created - startedAt)
    const envelopes = await qa.envelopes(sessionID)
    const observations = envelopes.filter((e) => e.status === "running")
    const bytes = bytesOf(observations)
    const perHourLinear = (bytes / minutes) * 60
    const summary = {
      minutes: Number(minutes.toFixed(2)),
      observationEnvelopes: observations.length,
      observationBytes: bytes,
      wakeBytes: Buffer.byteLength(wake.text),
      linesShown: observations.reduce((n, e) => n + seqsIn(e.text).length, 0),
      linesPrinted: 3_001,
      perHourLinearKB: Number((perHourLinear / 1024).toFixed(1)),
      // Once the session total is spent only summaries follow (one per 5 minutes, < 1 KB each).
      perHourWithSessionTotalKB: Number(
        ((bytes <= SESSION_BYTES ? Math.min(perHourLinear, SESSION_BYTES + 12 * 1024) : perHourLinear) / 1024).toFixed(
          1,
        ),
      ),
    }
    console.log(`budget chatty: ${JSON.stringify(summary)}`)

    // Within the documented budget: the burst plus the per-minute rate, and the session's total.
    expect(bytes).toBeLessThanOrEqual(BURST_BYTES + BYTES_PER_MINUTE * minutes)
    expect(bytes).toBeLessThanOrEqual(SESSION_BYTES)
    // Without a budget this is ~300 envelopes and ~200 KB.
    expect(observations.length).toBeLessThan(60)
    expect(observations.some((e) => /^budget: \d+ lines/m.test(e.text))).toBe(true)

    // The exit wake is never held back and carries its own last lines. The last line comes a flush
    // interval after the line before it, as the flush timer does: when the timer takes it a moment before the
    // exit is seen, it goes out in that batch, which is the last observation if it fit the budget
    // (else the wake shows it as the latest held line). Either way it reaches the session once.
    expect(wake.status).toBe("exited (code=3)")
    const withLastLine = envelopes.filter((e) => e.text.includes("] chatty-last-line"))
    expect(withLastLine).toHaveLength(1)
    expect([wake.message.info.id, observations.at(-1)?.message.info.id]).toContain(withLastLine[0]?.message.info.id)
    // The envelope after held-back lines says how to read them: the wake, or the summary that went
    // out just before it (the run is as long as the summary interval, so either can come last).
    const readHint = /monitor_output \{"monitor_id":"(mon_[0-9a-f]+)","since_sequence":(\d+)\}/
    const note = [...envelopes]
      .reverse()
      .find((e) => readHint.test(e.text))
      ?.text.match(readHint)
    expect(note?.[1]).toBe(wake.monitorId)

    // A line the budget held back is still readable with monitor_output.
    const shown = new Set(envelopes.flatMap((e) => seqsIn(e.text)))
    const held = [2_950, 2_960, 2_970, 2_980, 2_990].find((seq) => !shown.has(seq))
    expect(held).toBeDefined()
    const ask = await qa.prompt(
      sessionID,
      planPrompt(
        "Show me what was held back.",
        [["monitor_output", { monitor_id: wake.monitorId, since_sequence: (held as number) - 1, limit: 3 }]],
        "Here it is.",
      ),
    )
    const messages = await qa.messages(sessionID)
    const asked = [...messages].reverse().find((m) => m.info.role === "user" && m.info.time.created >= ask)
    const reply = await waitForReply(
      qa,
      sessionID,
      asked?.info.id ?? "",
      (t) => t === "Here it is.",
      "the monitor_output answer",
    )
    const step = after(await qa.messages(sessionID), asked?.info.id ?? "").find(
      (m) => isAssistant(m) && m.parts.some((p) => p.type === "tool" && p.tool === "monitor_output"),
    )
    const part = step?.parts.find((p) => p.type === "tool" && p.tool === "monitor_output")
    const output = JSON.parse(part?.state?.output ?? "{}") as { lines?: { seq: number; text: string }[] }
    expect(output.lines?.[0]).toEqual(
      expect.objectContaining({ seq: held, text: REQUEST_LINE.replace("$i", String(held)) }),
    )
    expect(textOf(reply)).toBe("Here it is.")
  })
}, 360_000)

test("one ERROR line among 3 000 ordinary lines printed at once reaches the session", async () => {
  const sessionID = await qa.newSession({ title: "budget needle" })
  await qa.prompt(
    sessionID,
    planPrompt("Run the import.", [["monitor_start", { command: HAYSTACK, label: "import" }]], "Import started."),
  )
  await explained(qa, { needle: sessionID }, async () => {
    const found = await waitForEnvelope(
      qa,
      sessionID,
      (e) => e.text.includes(NEEDLE),
      "the envelope with the ERROR line",
      60_000,
    )
    // An observation, before the exit: the budget let it through, the wake did not carry it.
    expect(found.status).toBe("running")
    await waitForEnvelope(qa, sessionID, (e) => e.status !== "running", "the exit wake", 90_000)
    const observations = (await qa.envelopes(sessionID)).filter((e) => e.status === "running")
    const shown = observations.reduce((n, e) => n + seqsIn(e.text).length, 0)
    console.log(
      `budget needle: ${JSON.stringify({ observationEnvelopes: observations.length, observationBytes: bytesOf(observations), linesShown: shown })}`,
    )
    expect(shown).toBeLessThan(1_000)
    expect(bytesOf(observations)).toBeLessThanOrEqual(BURST_BYTES + BYTES_PER_MINUTE)
  })
}, 180_000)
