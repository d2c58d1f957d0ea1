import { formatStatus } from "../codec"
import { authorizeCommand } from "../permission/authorize"
import { z } from "zod"
import { tool } from "../tool-definition"
import { notFound } from "./describe"
import type { ToolDeps } from "./index"
import { startedText } from "./monitor-start"

const DESCRIPTION =
  "Restart a monitor of this session, running or ended (a dev server after a config change, the tests once more): " +
  "stops its process group and every process it started, waits until all are gone (so the port or lock they held is free), " +
  "then starts the same command in the same directory with the same options as a new monitor. The permission rules judge the command again, as for monitor_start. " +
  "You are not woken for the old one's stop. Use it instead of monitor_stop + monitor_start, which can race the old process for its port."

export function monitorRestart(deps: ToolDeps) {
  return tool({
    description: DESCRIPTION,
    args: { monitor_id: z.string().describe("The id of the monitor to restart, like mon_1a2b3c4d") },
    async execute(args, ctx) {
      const old = deps.manager.find(ctx.sessionID, args.monitor_id)
      if (!old) throw notFound(args.monitor_id)
      // Judged again exactly as monitor_start judges it: a refusal throws and leaves the old monitor running.
      await authorizeCommand(old.request, ctx, deps.config)
      await deps.router.sources.learn(ctx.sessionID, ctx.agent)
      // A running monitor's end is a stop the agent asked for; an ended one's exit notice still goes.
      if (old.info.status.kind === "running") deps.router.forgetMonitor(args.monitor_id)
      const restarted = await deps.manager.restart(ctx.sessionID, args.monitor_id)
      if (!restarted) throw notFound(args.monitor_id)
      const { started } = restarted
      const previous = restarted.previous.info
      return {
        title: `monitor ${started.label} restarted`,
        output: [
          `Restarted: the old monitor ${previous.id} ended with status ${formatStatus(previous.status)}; the new one is ${started.id}.`,
          startedText(started, deps.config, deps.router.sources.cached(ctx.sessionID)),
        ].join("\n"),
        metadata: { monitorId: started.id, previousMonitorId: previous.id, label: started.label },
      }
    },
  })
}
