// One recovering "server" for the claim-race test: recovers the state folder of the project given
// on the command line (XDG_STATE_HOME from the environment) and prints the monitors it reported.
import { serverIdentity } from "../../src/process/process-table"
import { recoverLostMonitors } from "../../src/state/recovery"
import { startMessage } from "./state-entry"

const [directory] = process.argv.slice(2)
const reported: string[] = []
await recoverLostMonitors({
  directory: directory as string,
  killGraceMs: 100,
  self: await serverIdentity(),
  // Every session's history shows the monitor_start of the monitor the record names.
  api: {
    recentMessages: async () => [startMessage(...Array.from({ length: 30 }, (_, i) => `mon_${i}`))],
    sessionExists: async () => true,
    log: () => {},
  },
  async deliver(batch) {
    reported.push(batch.monitorId)
  },
})
console.log(JSON.stringify(reported))
