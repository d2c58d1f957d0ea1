// test-runner: about 150 s (scripts/test.ts starts the longest first)
/**
 * Delivery under faults, against a real opencode serve. The plugin runs through a
 * test-only entry (src/fault-plugin.ts) that injects faults into its real session API: refused
 * sends, resets after the server accepted (ambiguous), timeouts (with and without the request
 * landing late), slow answers of 2–4 s, failing and slow history, status and parent reads, in a
 * seeded random mix. Many sessions run in parallel, every agent answer is slowed so monitors exit
 * both while their session is busy and while it is idle. Takes about 2–3 minutes.
 */
import { afterEach, expect, test } from "bun:test"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { DEFAULT_MODEL, type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"
import { deliveriesLogged, isAssistant, planPrompt, waitForExitNoticesDelivered } from "../src/scenario.ts"
import { type SessionMessage, textOf, waitFor, waitForIdle } from "../src/timeline.ts"

let qa: MonitorQA | undefined
afterEach(async () => {
  await qa?.stop().catch(() => undefined)
  qa = undefined
})

const SESSIONS = 12
const MONITORS_PER_SESSION = 6
const SEED = Number(process.env.FAULT_SEED ?? 12)

function promptFor(session: number): string {
  const steps: Array<[string, Record<string, unknown>]> = []
  for (let i = 0; i < MONITORS_PER_SESSION; i++) {
    // Exit times spread from 0.2 s to 4.7 s: some during the session's own turn, some after it.
    const sleep = ((session * 7 + i * 13) % 10) * 0.5 + 0.2
    steps.push([
      "monitor_start",
      { command: `echo f${session}-${i}; sleep ${sleep}; exit ${i + 1}`, label: `f${session}-${i}` },
    ])
  }
  return planPrompt("Start the jobs.", steps, "Jobs started.")
}

const reportsIn = (messages: SessionMessage[]) =>
  messages
    .filter(isAssistant)
    .flatMap((m) => [...textOf(m).matchAll(/Monitor \S+ \((mon_[0-9a-f]+)\) finished/g)].map((r) => r[1] as string))

/** The error texts of monitor_start calls that failed. */
const failedStartsIn = (messages: SessionMessage[]) =>
  messages.flatMap((m) =>
    (m.parts as { type?: string; tool?: string; state?: { status?: string; error?: string } }[])
      .filter((p) => p.type === "tool" && p.tool === "monitor_start" && p.state?.status === "error")
      .map((p) => String(p.state?.error ?? "").slice(0, 200)),
  )

const startedIn = (messages: SessionMessage[]) =>
  messages.flatMap((m) =>
    [...JSON.stringify(m.parts).matchAll(/Started monitor (mon_[0-9a-f]+)/g)].map((r) => r[1] as string),
  )

test("faults: every monitor's exit gives exactly one REPORT turn, none lost, none doubled, agent and model kept", async () => {
  const faultLog = join(mkdtempSync(join(tmpdir(), "omo-faults-")), "faults.log")
  writeFileSync(faultLog, "")
  const t0 = Date.now()
  const live = await startMonitorQA({
    pluginSpec: resolve(import.meta.dir, "../src/fault-plugin.ts"),
    pluginOptions: {
      monitor: { max_monitors_per_session: MONITORS_PER_SESSION, flush_interval_ms: 250, user_message_window_ms: 0 },
      faults: { seed: SEED, rate: 0.3, log: faultLog },
    },
    agentDelayMs: 300,
  })
  qa = live
  const sessions: { id: string; agent: string }[] = []
  for (let s = 0; s < SESSIONS; s++) {
    const agent = s % 2 === 0 ? "plan" : "build"
    sessions.push({ id: await live.newSession({ title: `faults ${s}` }), agent })
  }
  await Promise.all(sessions.map((s, i) => live.prompt(s.id, promptFor(i), { agent: s.agent, model: DEFAULT_MODEL })))

  const expected = SESSIONS * MONITORS_PER_SESSION
  // A monitor_start the injected faults made fail is an error the agent sees, not a lost exit:
  // every call is accounted for as started or failed, and every started monitor reported.
  const count = async () => {
    let started = 0
    let reported = 0
    const failed: string[] = []
    let pending = 0
    for (const s of sessions) {
      const messages = await live.messages(s.id)
      started += startedIn(messages).length
      reported += new Set(reportsIn(messages)).size
      failed.push(...failedStartsIn(messages))
      pending += messages
        .flatMap((m) => m.parts as { tool?: string; state?: { status?: string } }[])
        .filter(
          (p) => p.tool === "monitor_start" && p.state?.status !== "completed" && p.state?.status !== "error",
        ).length
    }
    return { started, reported, failed, pending }
  }
  let last = { started: 0, reported: 0, failed: [] as string[], pending: 0 }
  await waitFor(
    async () => {
      last = await count()
      return last.started + last.failed.length >= expected && last.reported >= last.started ? true : undefined
    },
    300_000,
    // Each look reads all 12 sessions' messages (tens of ms of server CPU each, more as they grow);
    // every 5 s, not 2, costs the wait at most 3 s more and the server a third as many reads.
    5_000,
    `${expected} monitor_start calls ended and every started monitor reported`,
  ).catch((error) => {
    // A red says how far it got: slow (reports still coming) or lost (stuck below the count).
    throw new Error(
      `${error.message}: ${last.started} monitors started, ${last.failed.length} starts failed, ${last.pending} still running, ${last.reported} reported; failures: ${JSON.stringify(last.failed.slice(0, 5))}`,
    )
  })
  // Every exit notice logged as delivered (sent, or found in the history after an ambiguous
  // failure): nothing of any monitor is left to send. Only the fault wrapper can still add a
  // message: a "timeout-late" request lands 1.5 s after its caller gave up, so wait that out.
  const ids: string[] = []
  for (const s of sessions) ids.push(...startedIn(await live.messages(s.id)))
  await waitForExitNoticesDelivered(live, ids, 120_000)
  await Bun.sleep(2_000)
  for (const s of sessions) await waitForIdle(live.server.client, s.id, 60_000, { busyGraceMs: 1_000 })

  let started = 0
  let lost = 0
  let duplicated = 0
  let terminalEnvelopes = 0
  let identityChanged = 0
  for (const s of sessions) {
    const messages = await live.messages(s.id)
    const envelopes = await live.envelopes(s.id)
    const ids = startedIn(messages)
    started += ids.length
    const reports = reportsIn(messages)
    const terminals = envelopes.filter((e) => e.status !== "running")
    terminalEnvelopes += terminals.length
    for (const id of ids) {
      const n = reports.filter((r) => r === id).length
      const t = terminals.filter((e) => e.monitorId === id).length
      if (n === 0 || t === 0) lost++
      if (n > 1 || t > 1) duplicated++
    }
    for (const m of messages) {
      const info = m.info as {
        role: string
        agent?: string
        mode?: string
        model?: unknown
        providerID?: string
        modelID?: string
      }
      const agent = info.role === "user" ? info.agent : info.mode
      const model = (info.role === "user" ? info.model : { providerID: info.providerID, modelID: info.modelID }) as
        | { providerID?: string; modelID?: string }
        | undefined
      if (
        agent !== s.agent ||
        model?.providerID !== DEFAULT_MODEL.providerID ||
        model?.modelID !== DEFAULT_MODEL.modelID
      ) {
        identityChanged++
      }
    }
  }
  const faults: Record<string, number> = {}
  for (const line of readFileSync(faultLog, "utf8").split("\n").filter(Boolean)) faults[line] = (faults[line] ?? 0) + 1
  const summary = {
    seed: SEED,
    sessions: SESSIONS,
    monitorsStarted: started,
    terminalEnvelopes,
    reportTurns: (await count()).reported,
    failedStarts: last.failed,
    lost,
    duplicated,
    identityChanged,
    faultsInjected: Object.values(faults).reduce((a, b) => a + b, 0),
    faults,
    seconds: Math.round((Date.now() - t0) / 1000),
  }
  console.log(`FAULT-RUN ${JSON.stringify(summary)}`)
  expect(started + last.failed.length).toBe(expected)
  expect(started).toBeGreaterThan(expected / 2)
  expect(terminalEnvelopes).toBe(started)
  expect(lost).toBe(0)
  expect(duplicated).toBe(0)
  expect(identityChanged).toBe(0)
  // The plugin's own account agrees: every batch it delivered, it delivered once.
  const twice = [...deliveriesLogged(live).entries()].filter(([, n]) => n > 1)
  expect(twice).toEqual([])
  expect(summary.faultsInjected).toBeGreaterThan(100)
  expect((await live.stop()).leftovers).toEqual([])
}, 420_000)
