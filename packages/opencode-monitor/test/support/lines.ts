import type { OutputBatch } from "../../src/pipeline/batcher"
import { lineText, type MonitorLine, type MonitorStream, textLine } from "../../src/pipeline/line"
import { plainRowBytes, renderedSize } from "../../src/pipeline/render"

const encoded = new Map<string, Uint8Array>()

/** A line made from text, sized as the pipeline sizes a batched line. */
export function sizedLine(
  seq: number,
  stream: MonitorStream,
  text: string,
  flags: { truncated?: boolean; matched?: boolean; wake?: boolean } = {},
): MonitorLine {
  // A test prints the same long line thousands of times: encoded once.
  let block = encoded.get(text)
  if (!block) {
    block = new TextEncoder().encode(text)
    if (encoded.size < 10_000) encoded.set(text, block)
  }
  const line = { ...textLine(seq, stream, "", flags), block, end: block.length }
  // Printable ASCII renders as its own bytes; anything else is measured as the pipeline measures it.
  line.size = /^[\x20-\x7e]*$/.test(text)
    ? plainRowBytes(block.length, stream, seq, line.truncated)
    : renderedSize(line)
  return line
}

/** The texts of lines, as an envelope shows them (sanitized). */
export const textsOf = (lines: readonly MonitorLine[]): string[] => lines.map(lineText)

/** A batch by hand: its `bytes` are its lines' sizes unless given. */
export function batchOf(fields: Omit<OutputBatch, "bytes"> & { bytes?: number }): OutputBatch {
  return { ...fields, bytes: fields.bytes ?? fields.lines.reduce((sum, line) => sum + line.size, 0) }
}
