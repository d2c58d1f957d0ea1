import type { MonitorManager } from "../manager"
import { z } from "zod"
import { tool } from "../tool-definition"
import { describeMonitor, notFound } from "./describe"

const DESCRIPTION =
  "Stop a monitor started in this session (SIGTERM to its process group, SIGKILL after the grace period). Returns its final status and counters; you are not woken again for it."

export function monitorStop(deps: { manager: MonitorManager; afterStop: (monitorId: string) => void }) {
  const { manager } = deps
  return tool({
    description: DESCRIPTION,
    args: { monitor_id: z.string().describe("The id monitor_start returned, like mon_1a2b3c4d") },
    async execute(args, ctx) {
      const before = manager.get(ctx.sessionID, args.monitor_id)
      if (!before) throw notFound(args.monitor_id)
      deps.afterStop(args.monitor_id)
      const info = await manager.stop(ctx.sessionID, args.monitor_id, "agent")
      if (!info) throw notFound(args.monitor_id)
      // What really happened: a process that exited on its own while the stop came in keeps its exit.
      const stoppedNow =
        before.status.kind === "running" && info.ending?.reason === "stop" && info.ending.by === "agent"
      const note = stoppedNow
        ? `Stopped. Output not yet delivered is not sent; read it with monitor_output (monitor_id "${info.id}") while it is retained.`
        : "It had already ended; nothing was stopped."
      return JSON.stringify({ ...describeMonitor(info), note })
    },
  })
}
