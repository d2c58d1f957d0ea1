import { createHash } from "node:crypto"
import { homedir } from "node:os"
import { join } from "node:path"
import { z } from "zod"
import type { Ending, MonitorStatus, StopReason } from "../codec"
import type { MonitorInfo } from "../monitor-run"

// A server's monitors on disk, for the TUI and a restarted server: labels only (never the command), all bounded.
export const STATE_FORMAT = "opencode-monitor/state@2"

/** At most this many last lines per monitor, each at most STATE_LINE_TEXT_MAX characters. */
export const STATE_LAST_LINES = 5
export const STATE_LINE_TEXT_MAX = 512
/** At most this many monitors per file (running first, then the newest ended ones). */
export const STATE_MAX_MONITORS = 64
/** A server's record is small (64 monitors × 5 lines of 512 characters); a larger file is not read. */
export const STATE_FILE_MAX_BYTES = 1024 * 1024
/** A state folder whose own size (it grows with its entries: ~1 500 names on ext4) is over this is not listed. */
export const STATE_FOLDER_MAX_BYTES = 64 * 1024
/** At most this many server records are read per pass (the rest are counted); real use has a handful. */
export const STATE_RECORDS_MAX = 32

export const integer = z.number().refine(Number.isInteger)
// A field a record may lack or spoil reads as absent: `optional` may be left out, `orUndefined` is always there.
const optional = <T extends z.ZodType>(schema: T) => schema.optional().catch(undefined)
const orUndefined = <T extends z.ZodType>(schema: T) => z.union([schema, z.undefined()]).catch(undefined)
const flag = optional(z.literal(true))
/** A record is data a process could have written, not trusted: the valid items of a list, after `cut` bounded it. */
const validItems = <T extends z.ZodType>(item: T, cut: (raw: unknown[]) => unknown[]) =>
  z.array(z.unknown()).transform((raw) =>
    cut(raw).flatMap((value) => {
      const parsed = item.safeParse(value)
      return parsed.success ? [parsed.data as z.output<T>] : []
    }),
  )

const StateLineSchema = z.object({ stream: z.enum(["stdout", "stderr"]), seq: integer, text: z.string() })
export type StateLine = z.infer<typeof StateLineSchema>

/** The last STATE_LAST_LINES lines, each cut to STATE_LINE_TEXT_MAX characters: what a record holds. */
function boundedLines(lines: readonly StateLine[]): StateLine[] {
  return lines
    .slice(-STATE_LAST_LINES)
    .map(({ stream, seq, text }) => ({ stream, seq, text: text.slice(0, STATE_LINE_TEXT_MAX) }))
}

const pids = optional(z.array(integer).transform((list) => list.slice(0, 64)))
const signal = z.string().regex(/^[A-Z0-9]{1,16}$/)
const plainName = (name: string) => name.replace(/[^A-Za-z0-9._+-]/g, "?").slice(0, 16)
/** What a run left behind and stopped, as the record names it: pids and plain short names only. */
const leftBehind = validItems(z.object({ pid: integer, name: z.string() }), (raw) => raw.slice(0, 64)).transform(
  (list) => (list.length > 0 ? list.map(({ pid, name }) => ({ pid, name: plainName(name) })) : undefined),
)
const leftovers = { survivors: pids, pipesHeld: flag, unsearched: pids, leftBehind: optional(leftBehind) }

/** A recorded status, field by field; one this version cannot read makes its entry unreadable. */
const StatusSchema: z.ZodType<MonitorStatus> = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("running") }),
  z.object({ kind: z.literal("exited"), code: integer, ...leftovers }),
  z.object({ kind: z.literal("signaled"), signal: signal.catch("unknown"), ...leftovers }),
  z.object({ kind: z.literal("timed_out"), afterMs: integer, signal: signal.nullable().catch(null), ...leftovers }),
  z.object({ kind: z.literal("stopped"), signal: signal.nullable().catch(null), byPerson: flag, ...leftovers }),
  z.object({ kind: z.literal("lost"), survivorPid: orUndefined(integer), ...leftovers }),
])

const EndingSchema: z.ZodType<Ending> = z.union([
  z.object({ reason: z.enum(["exit", "deadline"]) }),
  z.object({
    reason: z.literal("stop"),
    by: z.enum(["agent", "person", "session", "shutdown"] satisfies StopReason[]),
  }),
])

const MonitorStateEntrySchema = z.object({
  id: z.string(),
  sessionID: z.string(),
  label: z.string(),
  startedAt: integer,
  endedAt: orUndefined(integer),
  /** The status itself, not its text: a restarted server delivers exactly this. */
  status: StatusSchema,
  /** How it came to its end, once decided (who stopped it, for a stop). */
  ending: orUndefined(EndingSchema),
  /** The process group leader, and its start time (process-table.ts) to prove identity. */
  pid: integer,
  pidStartTime: orUndefined(z.string()),
  linesSeen: integer,
  lastLines: validItems(StateLineSchema, (raw) => raw.slice(-STATE_LAST_LINES))
    .catch([])
    .transform(boundedLines),
  /** When its deadline stops it; absent: no deadline. */
  deadlineAt: optional(integer),
  /** It ended, but its exit notice had not reached the session: a restarted server delivers it. */
  wakePending: flag,
  /** sha256 of the token in the monitor's environment: recovery signals only a leader that carries it. */
  tokenHash: optional(z.string().regex(/^[0-9a-f]{64}$/)),
})

export type MonitorStateEntry = z.infer<typeof MonitorStateEntrySchema>

const ServerStateFileSchema = z.object({
  format: z.literal(STATE_FORMAT),
  server: z.object({ pid: integer, pidStartTime: orUndefined(z.string()), directory: z.string(), updatedAt: integer }),
  monitors: validItems(MonitorStateEntrySchema, (raw) => raw.slice(0, STATE_MAX_MONITORS)),
})

export type ServerStateFile = z.infer<typeof ServerStateFileSchema>

/** The process group leader as it started: its start time and token hash prove it is the monitor's later. */
type Leader = { pid: number; startTime?: string; tokenHash?: string }

/** A monitor as its record holds it: its label, never its command; its last lines bounded. */
export function stateEntry(info: MonitorInfo, leader: Leader, lastLines: readonly StateLine[]): MonitorStateEntry {
  return {
    id: info.id,
    sessionID: info.sessionID,
    label: info.label,
    startedAt: info.startedAt,
    endedAt: info.endedAt,
    status: info.status,
    ending: info.ending,
    pid: leader.pid,
    pidStartTime: leader.startTime,
    linesSeen: info.counters.total,
    lastLines: boundedLines(lastLines),
    ...(info.timeoutMs !== undefined ? { deadlineAt: info.startedAt + info.timeoutMs } : {}),
    ...(leader.tokenHash ? { tokenHash: leader.tokenHash } : {}),
  }
}

/** `$XDG_STATE_HOME/opencode/opencode-monitor/<hash of the directory>`: a server sees only its project's records. */
export function projectStateDir(directory: string, env: Record<string, string | undefined> = process.env): string {
  const base = env.XDG_STATE_HOME || join(env.HOME || homedir(), ".local", "state")
  return join(base, "opencode", "opencode-monitor", createHash("sha256").update(directory).digest("hex").slice(0, 16))
}

/** One file per plugin instance: opencode may make several for a directory in one server process. */
export function serverStateFileName(pid: number, pidStartTime: string | undefined, instance?: string): string {
  return `server-${pid}-${pidStartTime ?? "unknown"}${instance ? `-${instance}` : ""}.json`
}

export type ParseResult = { ok: true; file: ServerStateFile } | { ok: false; error: string }

/** Reads a state file's text; anything corrupt, partial, foreign or of another format is an error, never a throw. */
export function parseStateFile(text: string): ParseResult {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (error) {
    return { ok: false, error: `not JSON (${error instanceof Error ? error.message : String(error)})` }
  }
  const format = (raw as { format?: unknown } | null)?.format
  if (format !== STATE_FORMAT) return { ok: false, error: `unknown format ${JSON.stringify(format)}` }
  const parsed = ServerStateFileSchema.safeParse(raw)
  if (parsed.success) return { ok: true, file: parsed.data }
  const issue = parsed.error.issues[0]
  return { ok: false, error: `bad ${issue?.path.join(".") || "record"} (${issue?.message})` }
}
