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
 * How much one parse may cost. A command is at most `commandBytes` (Linux takes no longer `sh -c`
 * argument); its simple commands' texts together at most `answerChars` (nesting repeats a
 * command's text once per level: `$(…)` 8 000 deep comes to ~100 MB); the parse takes at most
 * `timeMs` in the worker, which is ended past that.
 */
export type ParseLimits = { commandBytes: number; answerChars: number; timeMs: number }
export const PARSE_LIMITS: ParseLimits = { commandBytes: 128 * 1024, answerChars: 1024 * 1024, timeMs: 2_000 }

// The parser runs in a worker of its own (bash-parser-worker.ts says why): the source file in a
// checkout; in the packed package the build's entry beside dist/index.js (this code may land in a chunk).
const WORKER_FILES = ["./bash-parser-worker.ts", "./bash-parser-worker.js", "../bash-parser-worker.js"]
const SPLIT_IT = "split it into smaller commands, or put the script in a file and run that file"

/**
 * Asks the worker one command and awaits it, never waiting on this thread: a command it takes too
 * long over ends it (the next parse starts a new one), and this thread stays free.
 */
function parseIn(worker: Worker, command: string, limits: ParseLimits): Promise<SimpleCommand[]> {
  return new Promise((resolve, reject) => {
    const end = (error: Error) => {
      clearTimeout(timer)
      parser = undefined
      worker.terminate()
      reject(error)
    }
    const timer = setTimeout(
      () => end(refusal(`the bash parser took longer than ${limits.timeMs} ms over it`)),
      limits.timeMs,
    )
    worker.onerror = (event) => end(new Error(`the bash parser's worker failed: ${event.message}`))
    // Referenced only while it parses: an idle parser never holds the process open.
    worker.ref()
    worker.onmessage = ({ data }: MessageEvent<ParseAnswer>) => {
      clearTimeout(timer)
      worker.unref()
      // One more turn before settling: bun test's `expect(…).rejects` misses a promise settled
      // straight from a worker's message (oven-sh/bun#37189).
      setTimeout(() => {
        if ("commands" in data) resolve(data.commands)
        else if ("tooLarge" in data)
          reject(refusal(`its simple commands come to more than ${limits.answerChars} characters`))
        else reject(new Error(data.error))
      }, 0)
    }
    worker.postMessage({ command, maxChars: limits.answerChars } satisfies ParseRequest)
  })
}

/** A command the permission check cannot judge within its limits: refused, never run unjudged. */
function refusal(why: string): MonitorError {
  return new MonitorError(
    "invalid_argument",
    `This command is too large to check against the permission rules (${why}); ${SPLIT_IT}.`,
  )
}

let parser: Promise<Worker> | undefined
// Parses run one after another: a worker that is ended for one command takes no other with it.
let queue: Promise<unknown> = Promise.resolve()

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
      if (data.ready) resolve(worker)
      else fail(new Error(data.error ?? "the bash parser's worker failed"))
    }
    worker.onerror = (event) => fail(new Error(`the bash parser's worker failed: ${event.message}`))
  })
  return parser
}

/**
 * Every simple command in a command string, nested ones included (pipelines, lists, subshells,
 * `$(…)`, backticks, process substitution, here-doc bodies), in document order — the same set
 * opencode's bash tool asks the `bash` permission for. A command beyond `limits` is refused
 * (MonitorError) rather than judged in part.
 */
export function parseSimpleCommands(command: string, limits: ParseLimits = PARSE_LIMITS): Promise<SimpleCommand[]> {
  const bytes = Buffer.byteLength(command)
  if (bytes > limits.commandBytes) {
    return Promise.reject(refusal(`${bytes} bytes, at most ${limits.commandBytes}`))
  }
  const turn = queue.then(async () => parseIn(await loadBashParser(), command, limits))
  queue = turn.catch(() => {})
  return turn
}
