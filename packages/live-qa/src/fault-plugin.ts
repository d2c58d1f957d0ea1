/**
 * TEST-ONLY plugin entry: the real opencode-monitor (`createMonitorPlugin`) around a
 * fault-injecting wrapper of its real, client-backed session API. Never shipped: the production
 * entry is `packages/opencode-monitor/src/index.ts`. Options: `{ monitor: <plugin options>,
 * faults: { seed, rate, log } }`; every injected fault is appended to `log`, one kind per line.
 */
import { appendFileSync } from "node:fs"
import type { Plugin, PluginModule } from "@opencode-ai/plugin"
import { parseMonitorConfig } from "../../opencode-monitor/src/config.ts"
import { createSessionApi, DeliveryError, type SessionApi } from "../../opencode-monitor/src/delivery/session-api.ts"
import { createMonitorPlugin } from "../../opencode-monitor/src/plugin.ts"

export type FaultOptions = { seed: number; rate: number; log: string }

export const PROMPT_FAULTS = ["refused", "reset", "timeout", "timeout-late", "slow"] as const
export const READ_FAULTS = ["fail", "slow"] as const

/** mulberry32: a seeded PRNG, so a failing mix can be replayed. */
function random(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export function withFaults(api: SessionApi, options: FaultOptions): SessionApi {
  const next = random(options.seed)
  const pick = <T extends readonly string[]>(kinds: T): T[number] | undefined =>
    next() < options.rate ? kinds[Math.floor(next() * kinds.length)] : undefined
  const record = (call: string, kind: string) => appendFileSync(options.log, `${call}:${kind}\n`)
  const slowMs = () => 2_000 + Math.floor(next() * 2_000)

  async function read<T>(call: string, run: () => Promise<T>): Promise<T> {
    const fault = pick(READ_FAULTS)
    if (fault) record(call, fault)
    if (fault === "fail") throw new Error(`injected fault: ${call} failed`)
    if (fault === "slow") await sleep(slowMs())
    return run()
  }

  return {
    ...api,
    busySessions: () => read("status", () => api.busySessions()),
    recentMessages: (sessionID, limit) => read("history", () => api.recentMessages(sessionID, limit)),
    parentOf: (sessionID) => read("parent", () => api.parentOf(sessionID)),
    async prompt(sessionID, request) {
      const fault = pick(PROMPT_FAULTS)
      if (fault) record("prompt", fault)
      switch (fault) {
        case "refused": // an error before the server accepted anything
          throw new DeliveryError("rejected", "injected fault: connection refused")
        case "reset": // the server accepted it, the answer was lost
          await api.prompt(sessionID, request)
          throw new DeliveryError("ambiguous", "injected fault: connection reset after the request was sent")
        case "timeout": {
          // No answer in time; the request never reached the server.
          await sleep(1_000)
          throw new DeliveryError("ambiguous", "injected fault: timed out")
        }
        case "timeout-late": {
          // No answer in time; the request still reaches the server, after the client gave up.
          setTimeout(() => void api.prompt(sessionID, request).catch(() => undefined), 1_500)
          await sleep(1_000)
          throw new DeliveryError("ambiguous", "injected fault: timed out")
        }
        case "slow":
          await sleep(slowMs())
          return api.prompt(sessionID, request)
        default:
          return api.prompt(sessionID, request)
      }
    },
  }
}

const server: Plugin = async (input, options) => {
  const { monitor, faults } = (options ?? {}) as { monitor?: unknown; faults: FaultOptions }
  const parsed = parseMonitorConfig(monitor)
  if (!parsed.ok) throw new Error(parsed.errors.join("; "))
  const api = withFaults(createSessionApi(input.client), faults)
  return createMonitorPlugin(parsed.config, { api }).hooks
}

const plugin: PluginModule & { id: string } = { id: "opencode-monitor-faults", server }
export default plugin
