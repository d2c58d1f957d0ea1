import type { ToolContext } from "@opencode-ai/plugin"
import { z } from "zod"
import { describeIssue, int, MAX_TIMEOUT_MS, type MonitorConfig, SILENCE_MS_MAX, SILENCE_MS_MIN } from "./config"
import { sanitizeLabel } from "./delivery/envelope"
import { MonitorError } from "./errors"
import { parseSimpleCommands, type SimpleCommand } from "./permission/bash-parser"
import { programName, programWord } from "./process/program-word"

// One `monitor_start` call, parsed once for the permission check, the manager and the envelopes.

/** The most match wakes one monitor may ask for (`wake_limit`), and what it gets without asking. */
const WAKE_LIMIT_MAX = 20
const WAKE_LIMIT_DEFAULT = 1

/** The arguments of monitor_start, as opencode shows them to the model. */
export function startArgs(config: MonitorConfig, shell: string) {
  // A set max_runtime_ms caps timeout_ms; without it (0) a monitor has no deadline unless asked.
  const cap = config.max_runtime_ms
  const max = cap > 0 ? cap : MAX_TIMEOUT_MS
  return {
    command: z
      .string()
      .describe(`Shell command, run as \`${shell} -c <command>\` in the session's directory, like the bash tool`),
    label: z
      .string()
      .optional()
      .describe("Short name shown in envelopes, lists and toasts (default: the program name)"),
    match_pattern: z
      .string()
      .optional()
      .describe("RE2 regular expression; only matching lines are delivered (default: every line)"),
    wake_pattern: z
      .string()
      .optional()
      .describe(
        "RE2 regular expression; a matching line wakes you while the command runs, e.g. 'ready on|listening on' or 'FAIL|Error'. Independent of match_pattern",
      ),
    wake_limit: int(1, WAKE_LIMIT_MAX)
      .optional()
      .describe(
        `How many times matches may wake you (default ${WAKE_LIMIT_DEFAULT}: tell me once; max ${WAKE_LIMIT_MAX}); later matches arrive as observations`,
      ),
    wake_on_silence_ms: int(SILENCE_MS_MIN, SILENCE_MS_MAX)
      .optional()
      .describe(
        `Wake me once when the command prints nothing (stdout and stderr) for this many ms while it runs, e.g. 60000 for a test run that may hang (${SILENCE_MS_MIN}-${SILENCE_MS_MAX}); again only after it printed something since`,
      ),
    timeout_ms: int(1, max)
      .optional()
      .describe(
        cap > 0
          ? `Stop the command after this many ms (default and max: ${cap}, max_runtime_ms)`
          : `Stop the command after this many ms: pass it for a job that should end (build, tests), none for a server or a watcher (default: no deadline; max ${MAX_TIMEOUT_MS})`,
      ),
  }
}

export type StartArgs = z.infer<z.ZodObject<ReturnType<typeof startArgs>>>

/** A start the manager can run: every default applied, every bound checked, the command parsed. */
export type StartRequest = {
  sessionID: string
  directory: string
  /** The command as it runs (trimmed), never shown: labels only. */
  command: string
  /** Its simple commands, as opencode's bash tool sees them. */
  commands: readonly SimpleCommand[]
  /** What must exist on PATH: the first simple command's program. */
  program: string | undefined
  /** Sanitized: the only label the monitor, its envelopes and its permission question use. */
  label: string
  matchPattern: string | undefined
  wakePattern: string | undefined
  /** Match wakes the monitor may cause: 0 without a `wake_pattern`. */
  wakeLimit: number
  /** `wake_on_silence_ms`; undefined: no silence wake. */
  silenceMs: number | undefined
  /** The deadline (`timeout_ms`, else a set `max_runtime_ms`); undefined: none. */
  timeoutMs: number | undefined
}

/** Parses a call's arguments (as the tool got them) into a StartRequest; MonitorError on a bad one. */
export async function parseStartRequest(
  args: Partial<Record<keyof StartArgs, unknown>>,
  ctx: Pick<ToolContext, "sessionID" | "directory">,
  config: MonitorConfig,
): Promise<StartRequest> {
  const schema = z.object(startArgs(config, "sh"))
  const parsed = schema.safeParse(args, { reportInput: true })
  if (!parsed.success) throw new MonitorError("invalid_argument", argumentProblem(schema, parsed.error, config))
  const { data } = parsed
  const command = data.command.trim()
  if (command === "") throw new MonitorError("invalid_argument", "command is empty; pass the shell command to run.")
  if (data.wake_limit !== undefined && !data.wake_pattern) {
    throw new MonitorError(
      "invalid_argument",
      "wake_limit needs a wake_pattern: pass the regex of the line that should wake you.",
    )
  }
  const commands = await parseSimpleCommands(command)
  const argv = commands[0]?.argv ?? []
  const wakePattern = data.wake_pattern || undefined
  return {
    sessionID: ctx.sessionID,
    directory: ctx.directory,
    command,
    commands,
    program: commands[0] && programWord(argv),
    label: sanitizeLabel(data.label ?? programName(argv)),
    matchPattern: data.match_pattern || undefined,
    wakePattern,
    wakeLimit: wakePattern ? (data.wake_limit ?? WAKE_LIMIT_DEFAULT) : 0,
    silenceMs: data.wake_on_silence_ms,
    timeoutMs: data.timeout_ms ?? (config.max_runtime_ms > 0 ? config.max_runtime_ms : undefined),
  }
}

/** The first issue; a numeric argument's with its bounds, read from the schema itself. */
function argumentProblem(schema: z.ZodObject<ReturnType<typeof startArgs>>, error: z.ZodError, config: MonitorConfig) {
  const issue = error.issues[0] as z.core.$ZodIssue
  const key = String(issue.path[0])
  const shape = schema.shape[key as keyof StartArgs]
  const field = shape instanceof z.ZodOptional ? shape.unwrap() : shape
  if (!(field instanceof z.ZodNumber)) return `${describeIssue(issue, "arguments")}.`
  const why = key !== "timeout_ms" ? "" : config.max_runtime_ms > 0 ? " (max_runtime_ms)" : " (7 days)"
  return `${key} must be an integer from ${field.minValue} to ${field.maxValue}${why}; got ${JSON.stringify(issue.input)}.`
}
