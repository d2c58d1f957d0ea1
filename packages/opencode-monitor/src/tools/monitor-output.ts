import { int } from "../config"
import { z } from "zod"
import { lineText } from "../pipeline/line"
import { tool } from "../tool-definition"
import type { ToolDeps } from "./index"
import { describeMonitor, notFound } from "./describe"

const DESCRIPTION =
  "Read the lines a monitor still retains, including lines match_pattern filtered out or that were dropped from delivery. Not needed to wait for output: it arrives by itself."

const OUTPUT_LIMIT_MAX = 500
const OUTPUT_LIMIT_DEFAULT = 100
// monitor_output answers at most this much line text, so one call cannot flood the context.
const OUTPUT_TEXT_BUDGET = 64 * 1024

const args = {
  monitor_id: z.string().describe("The monitor's id"),
  stream: z
    .enum(["matched", "unmatched", "all"])
    .default("all")
    .describe("Which lines: matched by match_pattern, unmatched, or all (default)"),
  since_sequence: int(0).optional().describe("Only lines with seq greater than this"),
  limit: int(1, OUTPUT_LIMIT_MAX)
    .default(OUTPUT_LIMIT_DEFAULT)
    .describe(`At most this many lines, oldest first (default ${OUTPUT_LIMIT_DEFAULT})`),
}

export function monitorOutput({ manager }: ToolDeps) {
  return tool({
    description: DESCRIPTION,
    args,
    async execute(raw, ctx) {
      const { monitor_id, stream, since_sequence, limit } = z.object(args).parse(raw)
      // One line past the limit says whether more are retained after the ones returned.
      const result = manager.output(ctx.sessionID, monitor_id, {
        stream,
        sinceSequence: since_sequence,
        limit: limit + 1,
      })
      if (!result) throw notFound(monitor_id)
      const lines: { seq: number; stream: string; matched: boolean; truncated: boolean; text: string }[] = []
      let budget = OUTPUT_TEXT_BUDGET
      for (const line of result.lines.slice(0, limit)) {
        const text = lineText(line)
        if (lines.length > 0 && text.length > budget) break
        budget -= text.length
        lines.push({ seq: line.seq, stream: line.stream, matched: line.matched, truncated: line.truncated, text })
      }
      const last = lines[lines.length - 1]
      return JSON.stringify({
        ...describeMonitor(result.info),
        lines,
        more: lines.length < result.lines.length,
        next_since_sequence: last ? last.seq : (since_sequence ?? 0),
      })
    },
  })
}
