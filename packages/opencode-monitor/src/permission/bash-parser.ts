import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { MonitorError } from "../errors"

/** One simple command as opencode's bash tool sees it. */
export type SimpleCommand = {
  /** The permission pattern: the command's text (with its redirections), trimmed. */
  text: string
  /** Its name and argument words, quotes kept, assignments and expansions left out. */
  words: string[]
  /** Every word as written, leading `NAME=value` assignments, numbers and expansions included. */
  argv: string[]
}

/** What the server thread asks its parser's worker, and what the worker answers. */
export type ParseRequest = { command: string; maxChars: number }
export type ParseAnswer = { commands: SimpleCommand[] } | { tooLarge: true } | { error: string }

/**
 * One parse's cost: `commandBytes` (Linux's longest `sh -c` argument); `answerChars` for the simple commands'
 * texts (nesting repeats text per level: `$(…)` 8 000 deep is ~100 MB); `timeMs`, then the worker is ended.
 */
export type ParseLimits = { commandBytes: number; answerChars: number; timeMs: number }
const PARSE_LIMITS: ParseLimits = { commandBytes: 128 * 1024, answerChars: 1024 * 1024, timeMs: 5_000 }

// The worker (bash-parser-worker.ts says why): the source in a checkout; packed, beside dist/index.js (or a chunk's).
const WORKER_FILES = ["./bash-parser-worker.ts", "./bash-parser-worker.js", "../bash-parser-worker.js"]
const SPLIT_IT = "split it into smaller commands, or put the script in a file and run that file"

/** One command asked of the worker, with the limits it is judged by. */
type Parse = { command: string; limits: ParseLimits } & ReturnType<typeof Promise.withResolvers<SimpleCommand[]>>

// All parses are posted at once, answered in order: sessions starting together wait one round trip, not one each.
let posted: Parse[] = []
let deadline: ReturnType<typeof setTimeout> | undefined
// The worker `posted` waits on. An ended one's late message is ignored: its parses were failed or asked again.
let working: Worker | undefined

function ask(parse: Parse): void {
  loadBashParser().then((worker) => {
    posted.push(parse)
    // Referenced only while it parses: an idle parser never holds the process open.
    worker.ref()
    worker.postMessage({ command: parse.command, maxChars: parse.limits.answerChars } satisfies ParseRequest)
    if (posted.length === 1) timeOldest(worker)
  }, parse.reject)
}

/** The oldest parse gets its `timeMs` from now (the worker started it once it answered the one before). */
function timeOldest(worker: Worker): void {
  clearTimeout(deadline)
  const oldest = posted[0]
  if (!oldest) return void worker.unref()
  const { timeMs } = oldest.limits
  deadline = setTimeout(
    () => endWorker(worker, refusal(`the bash parser took longer than ${timeMs} ms over it`)),
    timeMs,
  )
}

function answered(worker: Worker, data: ParseAnswer): void {
  if (worker !== working) return
  const parse = posted.shift()
  timeOldest(worker)
  if (!parse) return
  // Settled a turn later: bun test's `expect(…).rejects` misses one settled in a worker message (oven-sh/bun#37189).
  setTimeout(() => {
    if ("commands" in data) parse.resolve(data.commands)
    else if ("tooLarge" in data)
      parse.reject(refusal(`its simple commands come to more than ${parse.limits.answerChars} characters`))
    else parse.reject(new Error(data.error))
  }, 0)
}

/** Ends a failed or slow worker without waiting: its parse fails, the ones posted after it go to a new worker. */
function endWorker(worker: Worker, error: Error): void {
  if (worker !== working) return
  working = undefined
  clearTimeout(deadline)
  parser = undefined
  worker.terminate()
  const [oldest, ...rest] = posted
  posted = []
  oldest?.reject(error)
  for (const parse of rest) ask(parse)
}

/** A command the permission check cannot judge within its limits: refused, never run unjudged. */
function refusal(why: string): MonitorError {
  return new MonitorError(
    "invalid_argument",
    `This command is too large to check against the permission rules (${why}); ${SPLIT_IT}.`,
  )
}

let parser: Promise<Worker> | undefined

function workerUrl(): URL {
  const urls = WORKER_FILES.map((file) => new URL(file, import.meta.url))
  const found = urls.find((url) => existsSync(fileURLToPath(url)))
  if (!found) throw new Error(`the bash parser's worker is missing (looked for ${WORKER_FILES.join(", ")})`)
  return found
}

/** True once the parser has been asked for: plugin load alone never loads it. */
export function bashParserRequested(): boolean {
  return parser !== undefined
}

/** Starts the parser's worker and loads the bash grammar there once, on first use (never at plugin load). */
export function loadBashParser(): Promise<Worker> {
  parser ??= new Promise<Worker>((resolve, reject) => {
    const worker = new Worker(workerUrl())
    const fail = (error: Error) => {
      parser = undefined
      worker.terminate()
      reject(error)
    }
    worker.onmessage = ({ data }: MessageEvent<{ ready?: true; error?: string }>) => {
      worker.unref()
      if (!data.ready) return fail(new Error(data.error ?? "the bash parser's worker failed"))
      working = worker
      worker.onmessage = (event: MessageEvent<ParseAnswer>) => answered(worker, event.data)
      worker.onerror = (event) => endWorker(worker, new Error(`the bash parser's worker failed: ${event.message}`))
      resolve(worker)
    }
    worker.onerror = (event) => fail(new Error(`the bash parser's worker failed: ${event.message}`))
  })
  return parser
}

/**
 * Every simple command, nested ones included (`$(…)`, backticks, subshells, here-docs…), in order: the set
 * opencode's bash tool asks `bash` permission for. Beyond `limits` it is refused, never judged in part.
 */
export function parseSimpleCommands(command: string, limits: ParseLimits = PARSE_LIMITS): Promise<SimpleCommand[]> {
  const bytes = Buffer.byteLength(command)
  if (bytes > limits.commandBytes) {
    return Promise.reject(refusal(`${bytes} bytes, at most ${limits.commandBytes}`))
  }
  const parse = { command, limits, ...Promise.withResolvers<SimpleCommand[]>() }
  ask(parse)
  return parse.promise
}
