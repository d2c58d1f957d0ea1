import { z } from "zod"
import { tool } from "../tool-definition"
import type { ToolDeps } from "./index"
import { describeMonitor } from "./describe"

const DESCRIPTION = "List this session's monitors: id, label, status, start time and line counters."

const args = {
  include_exited: z.boolean().default(false).describe("Also list monitors that already ended (default false)"),
}

export function monitorList({ manager }: ToolDeps) {
  return tool({
    description: DESCRIPTION,
    args,
    async execute(raw, ctx) {
      const { include_exited } = z.object(args).parse(raw)
      const monitors = manager.list(ctx.sessionID, include_exited)
      return JSON.stringify({ monitors: monitors.map(describeMonitor) })
    },
  })
}
