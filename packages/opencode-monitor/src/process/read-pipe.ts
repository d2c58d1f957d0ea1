import type { Readable } from "node:stream"

// Every monitor's pipeline runs on the opencode server's event loop. A child that prints faster
// than we consume would keep 'data' callbacks coming back to back, so all pipes share one CPU
// slice per event-loop turn: past the budget a pipe is paused until the next turn. While paused,
// nothing is read, the pipe fills, and the kernel blocks the writer: memory stays bounded and no
// byte is lost.
const SLICE_BUDGET_MS = 4

let sliceOpen = false
let sliceStart = 0
const paused = new Set<Readable>()

function endSlice(): void {
  sliceOpen = false
  for (const stream of paused) stream.resume()
  paused.clear()
}

/** Feeds every chunk of `stream` to `onChunk` under the shared budget; resolves at EOF or close. */
export function readPipe(stream: Readable, onChunk: (chunk: Uint8Array) => void): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      paused.delete(stream)
      resolve()
    }
    stream.on("data", (chunk: Uint8Array) => {
      if (!sliceOpen) {
        sliceOpen = true
        sliceStart = performance.now()
        setImmediate(endSlice)
      }
      onChunk(chunk)
      if (performance.now() - sliceStart > SLICE_BUDGET_MS) {
        stream.pause()
        paused.add(stream)
      }
    })
    stream.once("end", done)
    stream.once("close", done)
    stream.once("error", done)
  })
}
