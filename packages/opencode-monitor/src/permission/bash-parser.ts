import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { PARSE_HEADER_BYTES, PARSE_STATUS } from "./bash-parser-protocol"

/** One simple command as opencode's bash tool sees it. */
export type SimpleCommand = {
  /** The permission pattern: the command's text (with its redirections), trimmed. */
  text: string
  /** Its name and argument words, quotes kept, assignments and expansions left out. */
  words: string[]
  /** Every word as written, leading `NAME=value` assignments, numbers and expansions included. */
  argv: string[]
}

// The parser runs in a worker of its own (bash-parser-worker.ts says why): the source file in a
// checkout; in the packed package the build's entry beside dist/index.js (this code may land in a chunk).
const WORKER_FILES = ["./bash-parser-worker.ts", "./bash-parser-worker.js", "../bash-parser-worker.js"]
// A parse takes well under a millisecond; a worker that never answers is an error, not a hang.
const PARSE_WAIT_MS = 10_000

/**
 * The worker, asked synchronously: a call waits (Atomics.wait) for the answer in a shared buffer,
 * as the parse on this thread did, so a start's promise settles without a message turn (bun test's
 * `expect(…).rejects` never sees one settled by a worker's message: oven-sh/bun#37189).
 */
class ParserThread {
  constructor(private readonly worker: Worker) {}

  parse(command: string): SimpleCommand[] {
    let room = 4096 + 8 * Buffer.byteLength(command)
    for (;;) {
      const shared = new SharedArrayBuffer(PARSE_HEADER_BYTES + room)
      const header = new Int32Array(shared, 0, 2)
      this.worker.postMessage({ command, shared })
      if (Atomics.wait(header, 0, 0, PARSE_WAIT_MS) === "timed-out") {
        parser = undefined
        this.worker.terminate()
        throw new Error(`the bash parser's worker did not answer within ${PARSE_WAIT_MS} ms`)
      }
      const [status, length = 0] = header
      if (status === PARSE_STATUS.tooLarge) {
        room = length
        continue
      }
      const text = Buffer.from(new Uint8Array(shared, PARSE_HEADER_BYTES, length)).toString("utf8")
      if (status === PARSE_STATUS.failed) throw new Error(text)
      return JSON.parse(text) as SimpleCommand[]
    }
  }
}

let parser: Promise<ParserThread> | undefined

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
export function loadBashParser(): Promise<ParserThread> {
  parser ??= new Promise<ParserThread>((resolve, reject) => {
    const worker = new Worker(workerUrl())
    // Never holds the process open: every call waits for its answer synchronously.
    worker.unref()
    const fail = (error: Error) => {
      parser = undefined
      worker.terminate()
      reject(error)
    }
    worker.onmessage = ({ data }: MessageEvent<{ ready?: true; error?: string }>) => {
      if (data.ready) resolve(new ParserThread(worker))
      else fail(new Error(data.error ?? "the bash parser's worker failed"))
    }
    worker.onerror = (event) => fail(new Error(`the bash parser's worker failed: ${event.message}`))
  })
  return parser
}

/**
 * Every simple command in a command string, nested ones included (pipelines, lists, subshells,
 * `$(…)`, backticks, process substitution, here-doc bodies), in document order — the same set
 * opencode's bash tool asks the `bash` permission for.
 */
export async function parseSimpleCommands(command: string): Promise<SimpleCommand[]> {
  return (await loadBashParser()).parse(command)
}
