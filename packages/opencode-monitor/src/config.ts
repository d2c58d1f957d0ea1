import { z } from "zod"

// The one source of truth for every option, its default and its bounds (a test holds the README table to it).
/** An integer from `min` (to `max`), for the options and the tools' arguments. */
export const int = (min: number, max?: number) => {
  const base = z.number().int().min(min)
  return max === undefined ? base : base.max(max)
}

/** The longest deadline anything may ask for: `max_runtime_ms` and `timeout_ms` (7 days). */
export const MAX_TIMEOUT_MS = 604_800_000
/** `wake_on_silence_ms` bounds: a second to a day. */
export const SILENCE_MS_MIN = 1_000
export const SILENCE_MS_MAX = 86_400_000

export const MonitorConfigSchema = z
  .object({
    max_monitors_per_session: int(1, 16).default(3),
    // 0: no deadline (a dev server lives as long as the session needs it); else it caps and defaults timeout_ms.
    max_runtime_ms: int(0, MAX_TIMEOUT_MS)
      .refine((v) => v === 0 || v >= 1_000, { message: "must be 0 (no deadline) or >= 1000" })
      .default(0),
    batch_max_lines: int(1).default(50),
    batch_max_bytes: int(1_024).default(16_384),
    flush_interval_ms: int(250).default(1_000),
    ring_max_lines: int(1, 100_000).default(1_000),
    line_max_bytes: int(256, 1_048_576).default(8_192),
    pattern_max_length: int(1).default(512),
    max_active_defer_ms: int(0)
      .refine((v) => v === 0 || v >= 1_000, { message: "must be 0 (no ceiling) or >= 1000" })
      .default(60_000),
    user_message_window_ms: int(0).default(2_000),
    pending_retry_ms: int(100).default(1_000),
    post_dispatch_hold_ms: int(1).default(250),
    accepted_message_skew_ms: int(0).default(5_000),
    kill_grace_ms: int(100).default(5_000),
    // The share of one core that reading every monitor's output may take; past it the pipes wait.
    output_cpu_share: z.number().min(0.05).max(1).default(0.25),
    retained_max_bytes: int(1_048_576).default(67_108_864),
    retained_max_monitors: int(1, 100_000).default(100),
    retained_max_age_ms: int(1_000).default(3_600_000),
    subagent_wake: z.enum(["off", "parent"]).default("parent"),
    automation_agents: z.array(z.string().min(1)).default([]),
    // Program names: each simple command is judged by its program word, so "npm run dev" could never match.
    allowed_commands: z
      .array(
        z
          .string()
          .min(1)
          .refine((name) => !/\s/.test(name), {
            message: 'must be a program name without spaces, like "npm" (each simple command is judged by its program)',
          }),
      )
      .default([]),
    // PYTHONUNBUFFERED=1 unless set: else a Python server's readiness line waits in its pipe buffer.
    unbuffered_runtimes: z.boolean().default(true),
    // Match wakes: the shortest gap between two of one monitor, and the most per session per minute.
    wake_min_interval_ms: int(1_000).default(10_000),
    // How long a match wake waits for the output to pause, so it carries the lines after the match.
    wake_settle_ms: int(0, 3_000).default(1_000),
    max_match_wakes_per_minute: int(1, 60).default(6),
    // Observation budget: see BENCHMARKS.md "Observation budget" for why these.
    observation_bytes_per_minute: int(0).default(4_096),
    observation_burst_bytes: int(1_024).default(16_384),
    observation_session_bytes: int(1_024).default(65_536),
    observation_summary_interval_ms: int(10_000).default(300_000),
  })
  .strict()

export type MonitorConfig = z.infer<typeof MonitorConfigSchema>

export type ConfigResult = { ok: true; config: MonitorConfig } | { ok: false; errors: string[] }

/** Validates plugin options; every error names the key, the bound and the value it got. */
export function parseMonitorConfig(options: unknown): ConfigResult {
  const parsed = MonitorConfigSchema.safeParse(options ?? {}, { reportInput: true })
  if (parsed.success) return { ok: true, config: parsed.data }
  return { ok: false, errors: parsed.error.issues.map((issue) => describeIssue(issue)) }
}

export function defaultMonitorConfig(): MonitorConfig {
  return MonitorConfigSchema.parse({})
}

/** One zod issue (parsed with `reportInput`) as a line naming the key, what it must be and what it got. */
export function describeIssue(issue: z.core.$ZodIssue, whole = "(options)"): string {
  const key = issue.path.join(".") || whole
  const got = `got ${JSON.stringify(issue.input)}`
  switch (issue.code) {
    case "too_small":
      return `${key} must be >= ${issue.minimum} (${got})`
    case "too_big":
      return `${key} must be <= ${issue.maximum} (${got})`
    case "invalid_type": {
      const type = issue.expected === "int" ? "integer" : issue.expected
      return `${key} must be ${/^[aeiou]/.test(type) ? "an" : "a"} ${type} (${got})`
    }
    case "invalid_value":
      return `${key} must be one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")} (${got})`
    case "unrecognized_keys":
      return `unknown option ${issue.keys.map((k) => JSON.stringify(k)).join(", ")}; see the README options table`
    default:
      return `${key} ${issue.message} (${got})`
  }
}
