import { describe, expect, test } from "bun:test"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { defaultMonitorConfig, MonitorConfigSchema, parseMonitorConfig } from "../src/config"

describe("plugin options", () => {
  test("the defaults", () => {
    expect(defaultMonitorConfig()).toEqual({
      max_monitors_per_session: 3,
      max_runtime_ms: 0,
      batch_max_lines: 50,
      batch_max_bytes: 16_384,
      flush_interval_ms: 1_000,
      ring_max_lines: 1_000,
      line_max_bytes: 8_192,
      pattern_max_length: 512,
      max_active_defer_ms: 60_000,
      user_message_window_ms: 2_000,
      pending_retry_ms: 1_000,
      post_dispatch_hold_ms: 250,
      accepted_message_skew_ms: 5_000,
      kill_grace_ms: 5_000,
      output_cpu_share: 0.25,
      retained_max_bytes: 67_108_864,
      retained_max_monitors: 100,
      retained_max_age_ms: 3_600_000,
      subagent_wake: "parent",
      automation_agents: [],
      allowed_commands: [],
      unbuffered_runtimes: true,
      wake_min_interval_ms: 10_000,
      wake_settle_ms: 1_000,
      max_match_wakes_per_minute: 6,
      observation_bytes_per_minute: 4_096,
      observation_burst_bytes: 16_384,
      observation_session_bytes: 65_536,
      observation_summary_interval_ms: 300_000,
    })
  })

  test.each([
    [{ max_monitors_per_session: 0 }, "max_monitors_per_session must be >= 1 (got 0)"],
    [{ max_monitors_per_session: 17 }, "max_monitors_per_session must be <= 16 (got 17)"],
    [{ max_runtime_ms: 999 }, "max_runtime_ms must be 0 (no deadline) or >= 1000 (got 999)"],
    [{ max_runtime_ms: 604_800_001 }, "max_runtime_ms must be <= 604800000 (got 604800001)"],
    [{ batch_max_bytes: 1000 }, "batch_max_bytes must be >= 1024 (got 1000)"],
    [{ flush_interval_ms: 10 }, "flush_interval_ms must be >= 250 (got 10)"],
    [{ ring_max_lines: 100_001 }, "ring_max_lines must be <= 100000 (got 100001)"],
    [{ line_max_bytes: 100 }, "line_max_bytes must be >= 256 (got 100)"],
    [{ max_active_defer_ms: 500 }, "max_active_defer_ms must be 0 (no ceiling) or >= 1000 (got 500)"],
    [{ pending_retry_ms: 1.5 }, "pending_retry_ms must be an integer (got 1.5)"],
    [{ kill_grace_ms: "5s" }, 'kill_grace_ms must be a number (got "5s")'],
    [{ subagent_wake: "always" }, 'subagent_wake must be one of "off", "parent" (got "always")'],
    [{ automation_agents: "bot" }, 'automation_agents must be an array (got "bot")'],
    [{ wake_min_interval_ms: 999 }, "wake_min_interval_ms must be >= 1000 (got 999)"],
    [{ max_match_wakes_per_minute: 0 }, "max_match_wakes_per_minute must be >= 1 (got 0)"],
    [{ max_match_wakes_per_minute: 61 }, "max_match_wakes_per_minute must be <= 60 (got 61)"],
    [{ max_monitor: 3 }, 'unknown option "max_monitor"; see the README options table'],
    [
      { allowed_commands: ["npm", "npm run dev"] },
      'allowed_commands.1 must be a program name without spaces, like "npm" (each simple command is judged by its program) (got "npm run dev")',
    ],
  ])("%o is refused: %s", (options, message) => {
    const result = parseMonitorConfig(options)
    expect(result.ok).toBe(false)
    if (!result.ok) expect(result.errors).toEqual([message])
  })

  test.each([
    [{ max_runtime_ms: 1_000 }],
    [{ max_runtime_ms: 604_800_000 }],
    [{ max_active_defer_ms: 1_000 }],
    [{ max_active_defer_ms: 0 }],
  ])("%o, at the README's bound, is accepted", (options) => {
    expect(parseMonitorConfig(options)).toEqual({ ok: true, config: { ...defaultMonitorConfig(), ...options } })
  })

  test("no options at all means the defaults", () => {
    expect(parseMonitorConfig(undefined)).toEqual({ ok: true, config: defaultMonitorConfig() })
  })

  test("the README options table matches the schema's defaults and bounds", () => {
    const readme = readFileSync(join(import.meta.dir, "../../../README.md"), "utf8")
    const section = readme.slice(readme.indexOf("## Options"), readme.indexOf("\n## ", readme.indexOf("## Options")))
    const rows = new Map<string, { def: string; bounds: string }>()
    for (const match of section.matchAll(/^\| `([a-z_]+)` \| `([^`]*)`[^|]* \| ([^|]+) \|/gm)) {
      rows.set(match[1] as string, { def: match[2] as string, bounds: (match[3] as string).trim() })
    }
    const defaults = defaultMonitorConfig() as Record<string, unknown>
    expect([...rows.keys()].sort()).toEqual(Object.keys(MonitorConfigSchema.shape).sort())
    for (const [key, row] of rows) {
      expect(JSON.parse(row.def)).toEqual(defaults[key])
      const bounds = boundsOf(key)
      if (bounds) expect(`${key}: ${row.bounds}`).toBe(`${key}: ${bounds}`)
    }
  })
})

/** The bounds text a README row must show, derived from the schema itself. */
function boundsOf(key: string): string | undefined {
  const shape = MonitorConfigSchema.shape as Record<string, { def: { innerType?: unknown } }>
  const inner = (shape[key]?.def.innerType ?? shape[key]) as { minValue?: number | null; maxValue?: number | null }
  if (key === "max_active_defer_ms") return "0 (no ceiling) or >= 1000"
  if (key === "max_runtime_ms") return `0 (no deadline) or 1000 to ${inner.maxValue}`
  const min = inner.minValue
  const max = inner.maxValue
  if (typeof min !== "number") return undefined
  return typeof max === "number" && Number.isFinite(max) && max < Number.MAX_SAFE_INTEGER
    ? `${min} to ${max}`
    : `>= ${min}`
}
