/**
 * Live benchmarks against a real `opencode serve` from the QA harness: wake latency, injection
 * budget under a flood while busy, and the load cost of the plugin.
 */
import { spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { PLUGIN_PACKAGE_DIR } from "../../live-qa/src/local-registry.ts"
import { type MonitorQA, PLUGIN_PATH, startMonitorQA } from "../../live-qa/src/monitor-qa.ts"
import { startOpencode } from "../../live-qa/src/opencode-server.ts"
import { startScriptedModel } from "../../live-qa/src/scripted-model.ts"
import { textOf, waitFor, waitForIdle } from "../../live-qa/src/timeline.ts"
import { log, type Plan } from "./plan.ts"
import type { Row } from "./report.ts"
import { median, p95 } from "./stats.ts"
import { longestGap } from "./stall-probe-plugin.ts"

const NO_STALL = { stallMs: Number.NaN, stallWorstMs: Number.NaN }
const PROBE_PLUGIN = join(import.meta.dir, "stall-probe-plugin.ts")

/** A probe plugin in the server measures its event loop; `gap(from, to)` reads the longest stall. */
function stallProbe() {
  const dir = mkdtempSync(join(tmpdir(), "bench-stall-"))
  const file = join(dir, "gaps.txt")
  return {
    plugin: [PROBE_PLUGIN, { file }] as [string, { file: string }],
    gap: (from: number, to: number) => longestGap(readFileSync(file, "utf8"), from, to),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}

export async function benchLive(plan: Plan): Promise<Row[]> {
  return [...(await benchWakeLatency(plan)), ...(await benchInjectionBudget(plan)), ...(await benchLoadCost(plan))]
}

/** The time of the plugin's "sent monitor output" line for a batch (logged once prompt_async answered). */
function sentAt(qa: MonitorQA, monitorId: string, batchSeq: number): number | undefined {
  const line = qa
    .pluginLog()
    .find(
      (l) => l.includes('"sent monitor output"') && l.includes(`source=monitor-output:${monitorId}:batch-${batchSeq} `),
    )
  const stamp = line?.match(/^timestamp=(\S+)/)?.[1]
  return stamp ? Date.parse(stamp) : undefined
}

type WakeSample = {
  accepted: number
  logged: number
  answered: number
  stall: number
  promptAccepted: number
  promptAnswered: number
  baseStall: number
}

/** One wake: a person's prompt into an idle session (the baseline), then a monitor that exits after 3 s. */
async function wakeOnce(qa: MonitorQA, probe: ReturnType<typeof stallProbe>, exitFile: string): Promise<WakeSample> {
  const sessionID = await qa.newSession({ title: "wake" })
  // Baseline in the same run: a person's prompt into an idle session, accepted and answered.
  const t0 = Date.now()
  await qa.prompt(sessionID, "warm up")
  const promptAccepted = Date.now() - t0
  await waitForIdle(qa.server.client, sessionID, 30_000)
  const baseStall = probe.gap(t0, Date.now())
  const first = (await qa.messages(sessionID)).find((m) => m.info.role === "assistant")
  // The command stamps its own exit time just before it exits.
  const command = `sleep 3; date +%s%3N > ${exitFile}; exit 3`
  const monitorFrom = Date.now()
  await qa.prompt(sessionID, `STEP monitor_start ${JSON.stringify({ command, label: "wake" })}\nSAY started`)
  const wake = await waitFor(
    async () => {
      const terminal = (await qa.envelopes(sessionID)).find((e) => e.status !== "running")
      if (!terminal) return undefined
      const messages = await qa.messages(sessionID)
      const index = messages.findIndex((m) => m.info.id === terminal.message.info.id)
      const reply = messages.slice(index + 1).find((m) => m.info.role === "assistant")
      return reply ? { terminal, reply } : undefined
    },
    30_000,
    50,
    "the wake and its reply",
  )
  await waitForIdle(qa.server.client, sessionID, 30_000, { busyGraceMs: 0 })
  const exitedAt = Number(readFileSync(exitFile, "utf8").trim())
  return {
    // Accepted = the moment opencode stored the injected message (prompt_async answers right after).
    accepted: wake.terminal.message.info.time.created - exitedAt,
    logged: (sentAt(qa, wake.terminal.monitorId, wake.terminal.batch) ?? Number.NaN) - exitedAt,
    answered: wake.reply.info.time.created - exitedAt,
    stall: probe.gap(monitorFrom, Date.now()),
    promptAccepted,
    promptAnswered: (first?.info.time.created ?? Number.NaN) - t0,
    baseStall,
  }
}

/** The opencode-monitor entry a build is loaded from: this tree's, or the `--before` build's. */
type WakeBuild = { label: string; pluginSpec: string | undefined }

/**
 * Exit → wake latency on a real `opencode serve`, `plan.exitWakes` wakes per build. With `--before`
 * a second server loads that build's `index.ts` beside the first, and the wakes alternate between
 * the two, so the machine's drift hits both alike.
 */
export async function benchWakeLatency(plan: Plan): Promise<Row[]> {
  const builds: WakeBuild[] = [{ label: "", pluginSpec: undefined }]
  if (plan.before) builds.push({ label: " [before]", pluginSpec: join(resolve(plan.before), "index.ts") })
  const dir = mkdtempSync(join(tmpdir(), "bench-wake-"))
  const servers: { build: WakeBuild; qa: MonitorQA; probe: ReturnType<typeof stallProbe>; samples: WakeSample[] }[] = []
  try {
    for (const build of builds) {
      const probe = stallProbe()
      servers.push({
        build,
        probe,
        samples: [],
        qa: await startMonitorQA({ extraPlugins: [probe.plugin], pluginSpec: build.pluginSpec }),
      })
    }
    for (let run = 0; run < plan.exitWakes; run++) {
      for (const [index, server] of servers.entries()) {
        const sample = await wakeOnce(server.qa, server.probe, join(dir, `exit-${run}-${index}`))
        server.samples.push(sample)
        log(
          `wake ${run + 1}/${plan.exitWakes}${server.build.label}: accepted +${sample.accepted} ms, assistant created +${sample.answered} ms`,
        )
      }
    }
  } finally {
    for (const server of servers) {
      await server.qa.stop()
      server.probe.remove()
    }
    rmSync(dir, { recursive: true, force: true })
  }
  const rows = servers.flatMap((server) => wakeRows(server.samples, server.build.label))
  const [now, before] = servers
  if (now && before) rows.push(exitWakeVsBefore(now.samples, before.samples))
  return rows
}

function wakeRows(samples: WakeSample[], label: string): Row[] {
  const pick = (key: keyof WakeSample) => samples.map((s) => s[key])
  const baseStalls = pick("baseStall")
  const stalls = pick("stall")
  const row = (name: string, values: number[], base: number[], target: string, met: boolean | undefined): Row => ({
    bench: "wake latency (live)",
    case: `${name}${label}`,
    figure: `p50 ${median(values).toFixed(0)} ms, p95 ${p95(values).toFixed(0)} ms (server stall during a plain prompt turn, no monitor: ${median(baseStalls).toFixed(0)} ms)`,
    baseline: `p50 ${median(base).toFixed(0)} ms`,
    ratio: median(values) / median(base),
    target,
    met,
    stallMs: median(stalls),
    stallWorstMs: Math.max(...stalls),
    runs: values.length,
    detail: { runs: values, baseline: base, pluginLogLineAfterExitMs: pick("logged"), stalls, baseStalls },
  })
  const accepted = pick("accepted")
  const isBefore = label !== ""
  return [
    row(
      "process exit → terminal prompt_async accepted (baseline: a person's prompt_async round trip)",
      accepted,
      pick("promptAccepted"),
      isBefore ? "–" : "p50 ≤ 50 ms",
      isBefore ? undefined : median(accepted) <= 50,
    ),
    row(
      "process exit → woken assistant message created (baseline: a person's prompt → assistant message)",
      pick("answered"),
      pick("promptAnswered"),
      "–",
      undefined,
    ),
  ]
}

/** The exit wake is not delayed by the settle window: this build against `--before`, same run. */
function exitWakeVsBefore(now: WakeSample[], before: WakeSample[]): Row {
  const values = now.map((s) => s.accepted)
  const base = before.map((s) => s.accepted)
  const p50 = median(values)
  const baseP50 = median(base)
  const stalls = now.map((s) => s.stall)
  return {
    bench: "wake latency (live)",
    case: "process exit → terminal prompt_async accepted, this build vs before (two servers, wakes alternating)",
    figure: `p50 ${p50.toFixed(0)} ms, p95 ${p95(values).toFixed(0)} ms`,
    baseline: `p50 ${baseP50.toFixed(0)} ms, p95 ${p95(base).toFixed(0)} ms [before]`,
    ratio: p50 / baseP50,
    target: "≈ 1× (unchanged: p50 ≤ 1.2× before, or ≤ 10 ms above it)",
    met: p50 <= 1.2 * baseP50 || p50 - baseP50 <= 10,
    stallMs: median(stalls),
    stallWorstMs: Math.max(...stalls),
    runs: values.length,
    detail: { runs: values, before: base },
  }
}

/** One busy turn (a long bash call) while a monitor runs `command`: what reached the session. */
async function busyTurnWithMonitor(
  qa: MonitorQA,
  probe: ReturnType<typeof stallProbe>,
  command: string,
  busySeconds: number,
) {
  const sessionID = await qa.newSession({ title: "injection budget" })
  // A first prompt makes opencode load its tools (a long stall of its own): keep it out of the window.
  await qa.prompt(sessionID, "warm up")
  await waitForIdle(qa.server.client, sessionID, 30_000)
  const started = Date.now()
  await qa.prompt(
    sessionID,
    [
      `STEP monitor_start ${JSON.stringify({ command, label: "flood" })}`,
      `STEP bash ${JSON.stringify({ command: `sleep ${busySeconds + 2}`, description: "long work" })}`,
      "SAY long work done",
    ].join("\n"),
  )
  await waitFor(
    async () => (await qa.envelopes(sessionID)).some((e) => e.status !== "running"),
    (busySeconds + 60) * 1000,
    200,
    "the terminal envelope",
  )
  await waitForIdle(qa.server.client, sessionID, 60_000, { busyGraceMs: 0 })
  const messages = await qa.messages(sessionID)
  const turnEnd = messages
    .filter((m) => m.info.role === "assistant" && textOf(m).includes("long work done"))
    .map((m) => m.info.time.completed ?? 0)[0]
  const envelopes = await qa.envelopes(sessionID)
  return {
    envelopes,
    during: envelopes.filter((e) => e.message.info.time.created < (turnEnd ?? 0)),
    bytes: envelopes.reduce((sum, e) => sum + Buffer.byteLength(e.text), 0),
    stall: probe.gap(started, Date.now()),
    elapsedMs: Date.now() - started,
  }
}

async function benchInjectionBudget(plan: Plan): Promise<Row[]> {
  const busySeconds = plan.quick ? 10 : 30
  const lines = plan.quick ? 300_000 : 1_000_000
  const perSecond = Math.ceil(lines / busySeconds)
  const probe = stallProbe()
  const qa = await startMonitorQA({ extraPlugins: [probe.plugin] })
  try {
    // Baseline in the same server: the same busy turn with a monitor that prints nothing.
    const quiet = await busyTurnWithMonitor(qa, probe, `sleep ${busySeconds}`, busySeconds)
    // About `lines` lines spread over the busy period, as a chatty dev server would print them.
    const flood = await busyTurnWithMonitor(
      qa,
      probe,
      `i=0; while [ $i -lt ${busySeconds} ]; do seq 1 ${perSecond}; sleep 1; i=$((i+1)); done`,
      busySeconds,
    )
    const rawBytes = perSecond * busySeconds * 7 // seq prints ~7 bytes a line at these counts
    const dropped = flood.envelopes.map((e) => e.text.match(/\ndropped: (.*)\n/)?.[1]).filter(Boolean)
    log(
      `injection budget: ${flood.envelopes.length} envelopes, ${flood.bytes} bytes, ${flood.during.length} during the busy turn`,
    )
    return [
      {
        bench: "injection budget (live)",
        case: `session busy ${busySeconds} s while a monitor prints ${perSecond * busySeconds} lines: envelopes injected (stall: opencode server; baseline: same turn, silent monitor)`,
        figure: `${flood.envelopes.length} envelopes, ${(flood.bytes / 1024).toFixed(1)} KB (~${Math.round(flood.bytes / 4)} tokens), ${flood.during.length} during the turn`,
        baseline: `${(rawBytes / 1024 / 1024).toFixed(1)} MB printed; silent monitor: ${quiet.envelopes.length} envelope(s), server stall ${quiet.stall.toFixed(0)} ms`,
        ratio: flood.bytes / rawBytes,
        target: "≤ 64 KB total, 0 during the turn",
        met: flood.bytes <= 64 * 1024 && flood.during.length === 0,
        stallMs: flood.stall,
        stallWorstMs: flood.stall,
        runs: 1,
        detail: {
          envelopes: flood.envelopes.map((e) => [e.batch, e.status]),
          bytes: flood.bytes,
          dropped,
          elapsedMs: flood.elapsedMs,
          quietStallMs: quiet.stall,
        },
      },
    ]
  } finally {
    await qa.stop()
    probe.remove()
  }
}

export async function benchLoadCost(plan: Plan): Promise<Row[]> {
  const runs = plan.quick ? 3 : 7
  const model = startScriptedModel(() => ({ text: "ok" }))
  // Any plugin at all makes opencode check its config dirs before loading plugins; a plugin that
  // does nothing separates that cost from what loading opencode-monitor itself adds.
  const noopDir = mkdtempSync(join(tmpdir(), "bench-noop-plugin-"))
  const noopPlugin = join(noopDir, "noop.ts")
  writeFileSync(noopPlugin, 'export default { id: "noop", server: async () => ({}) }\n')
  // What users install: the built dist/ (one bundled file, re2js a lazy chunk), built now from this tree.
  const build = spawnSync(process.execPath, ["scripts/build.ts"], { cwd: PLUGIN_PACKAGE_DIR, encoding: "utf8" })
  if (build.status !== 0) throw new Error(`building dist/ failed: ${build.stderr}`)
  const distEntry = join(PLUGIN_PACKAGE_DIR, "dist", "index.js")
  // The plugin's own share, timed inside the server: a wrapper imports dist/ and calls its factory.
  // A first request varies by ±50 ms from start to start here, more than that share.
  const timings = join(noopDir, "timings.jsonl")
  const timedPlugin = join(noopDir, "timed.js")
  writeFileSync(timedPlugin, timedWrapper(distEntry, timings))
  const sides = ["without", "noop", "with", "dist", "timed"] as const
  type Side = (typeof sides)[number]
  const plugins: Record<Side, [string, Record<string, never>][]> = {
    without: [],
    noop: [[noopPlugin, {}]],
    with: [[PLUGIN_PATH, {}]],
    dist: [[distEntry, {}]],
    timed: [[timedPlugin, {}]],
  }
  const listen: Record<Side, number[]> = { without: [], noop: [], with: [], dist: [], timed: [] }
  const inServer: InServer[] = []
  const firstRequest: Record<Side, number[]> = { without: [], noop: [], with: [], dist: [], timed: [] }
  try {
    for (let run = 0; run < runs; run++) {
      // Rotate the order, so drift of a noisy machine hits every side alike.
      for (let i = 0; i < sides.length; i++) {
        const side = sides[(run + i) % sides.length] as Side
        const server = await startOpencode({ modelBaseURL: model.baseURL, plugins: plugins[side] })
        try {
          listen[side].push(server.startupMs)
          // The first request initialises the project instance, which loads the plugins.
          const t = performance.now()
          const created = await server.client.session.create({ body: { title: "load" } })
          if (!created.data) throw new Error("session.create failed")
          firstRequest[side].push(performance.now() - t)
        } finally {
          await server.stop()
        }
      }
      const f = (side: Side) => firstRequest[side].at(-1)?.toFixed(0)
      log(
        `load cost ${run + 1}/${runs}: first request with dist/ ${f("dist")} ms, source ${f("with")} ms, no-op plugin ${f("noop")} ms, without ${f("without")} ms`,
      )
    }
    inServer.push(
      ...readFileSync(timings, "utf8")
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as InServer),
    )
  } finally {
    await model.stop()
    rmSync(noopDir, { recursive: true, force: true })
  }
  const row = (name: string, figures: Record<Side, number[]>, base: Side, side: "with" | "dist" = "with"): Row => {
    const added = median(figures[side]) - median(figures[base])
    const what = side === "dist" ? "the built dist/index.js" : "opencode-monitor (source)"
    return {
      bench: "load cost (live)",
      case: name,
      figure: `${median(figures[side]).toFixed(0)} ms with ${what} (${added >= 0 ? "+" : ""}${added.toFixed(0)} ms)`,
      baseline: `${median(figures[base]).toFixed(0)} ms ${base === "noop" ? "with a no-op plugin" : "without plugins"}`,
      ratio: median(figures[side]) / median(figures[base]),
      target: "≤ 50 ms added",
      met: added <= 50,
      ...NO_STALL,
      runs: figures[side].length,
      detail: figures,
    }
  }
  return [
    row("opencode serve start → listening", listen, "without"),
    row("first request (instance + plugin load), source path vs no plugin", firstRequest, "without"),
    row("first request (instance + plugin load), source path vs a no-op plugin", firstRequest, "noop"),
    row(
      "first request (instance + plugin load), built dist/ (what users install) vs a no-op plugin",
      firstRequest,
      "noop",
      "dist",
    ),
    inServerRow(inServer),
  ]
}

type InServer = { importMs: number; factoryMs: number }

/** A plugin that imports `entry` and calls its factory, appending both times to `out`. */
function timedWrapper(entry: string, out: string): string {
  return `import { appendFileSync } from "node:fs"
const t0 = performance.now()
const plugin = (await import(${JSON.stringify(entry)})).default
const importMs = performance.now() - t0
export default { id: "timed-opencode-monitor", async server(input, options) {
  const t1 = performance.now()
  const hooks = await plugin.server(input, options)
  appendFileSync(${JSON.stringify(out)}, JSON.stringify({ importMs, factoryMs: performance.now() - t1 }) + "\\n")
  return hooks
} }
`
}

function inServerRow(times: readonly InServer[]): Row {
  const total = times.map((t) => t.importMs + t.factoryMs)
  const imports = times.map((t) => t.importMs)
  const factories = times.map((t) => t.factoryMs)
  return {
    bench: "load cost (live)",
    case: "the plugin's own share, timed inside the server: import of dist/index.js + its server factory",
    figure: `${median(total).toFixed(1)} ms (import ${median(imports).toFixed(1)} ms, factory ${median(factories).toFixed(1)} ms)`,
    baseline: "0 ms (a no-op plugin has neither)",
    ratio: Number.NaN,
    target: "≤ 50 ms added",
    met: median(total) <= 50,
    ...NO_STALL,
    runs: times.length,
    detail: { times },
  }
}
