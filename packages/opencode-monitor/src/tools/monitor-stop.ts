import { formatEnding } from "../codec"
import type { StopResult } from "../manager"
import { z } from "zod"
import { tool } from "../tool-definition"
import { describeMonitor, notFound } from "./describe"
import type { ToolDeps } from "./index"

const DESCRIPTION =
  "Stop a monitor started in this session (SIGTERM to its process group, SIGKILL after the grace period). Returns its final status and counters; you are not woken again for it."

export function monitorStop({ manager, router }: ToolDeps) {
  return tool({
    description: DESCRIPTION,
    args: { monitor_id: z.string().describe("The id monitor_start returned, like mon_1a2b3c4d") },
    async execute(args, ctx) {
      if (!manager.get(ctx.sessionID, args.monitor_id)) throw notFound(args.monitor_id)
      // The agent asked for it: nothing more is delivered, and nobody is woken.
      router.forgetMonitor(args.monitor_id)
      const stopped = await manager.stop(ctx.sessionID, args.monitor_id, "agent")
      if (!stopped) throw notFound(args.monitor_id)
      return JSON.stringify({ ...describeMonitor(stopped.info), note: stopNote(stopped) })
    },
  })
}

/** What this call did, as the run decided: an exit, or a stop that came first (deadline, person), keeps its ending. */
function stopNote({ info, outcome }: StopResult): string {
  const unsent = `Output not yet delivered is not sent; read it with monitor_output (monitor_id "${info.id}") while it is retained.`
  const how = info.ending ? `: ${formatEnding(info.ending)}` : ""
  if (outcome === "stopped") return `Stopped. ${unsent}`
  if (outcome === "ended") return `It had already ended before this call${how}; nothing was stopped.`
  return `It was already ending when this call came${how}. Nothing more was stopped. ${unsent}`
}
