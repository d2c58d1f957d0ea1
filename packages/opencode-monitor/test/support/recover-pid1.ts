// Runs ONLY inside a fresh PID namespace (`unshare --pid --fork --mount-proc setsid sh -c '…'`, see
// state-attacks.test.ts): a forged record names pid 1 there, and restart recovery of 0547055 sent
// kill(-1), which in a namespace reaches only the processes of that namespace. Prints one JSON line.
import { spawn } from "node:child_process"
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { projectStateDir, STATE_FORMAT } from "../../src/state/format"
import { serverIdentity } from "../../src/process/process-table"
import { recoverLostMonitors } from "../../src/state/recovery"
import { waitFor } from "./processes"

const startOf = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "latin1")
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]
}
// The guard comes first: outside a new PID namespace, nothing below may run.
const pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name))
const init = readFileSync("/proc/1/cmdline", "latin1").split("\0")[0]
if (process.pid > 16 || pids.length > 16 || !/(^|\/)sh$/.test(init ?? "")) {
  console.log(JSON.stringify({ error: "not in a fresh PID namespace", pid: process.pid, processes: pids.length, init }))
  process.exit(2)
}
const [directory, stateHome] = process.argv.slice(2) as [string, string]
const env = { XDG_STATE_HOME: stateHome }
const dir = projectStateDir(directory, env)
mkdirSync(dir, { recursive: true, mode: 0o700 })
const victim = spawn("sleep", ["30"], { stdio: "ignore", detached: true })
// The victim is `sleep` itself (past its exec) before the forged record is read.
const execed = () => readFileSync(`/proc/${victim.pid}/cmdline`, "latin1").startsWith("sleep\0")
if (!(await waitFor(execed, 5_000))) throw new Error("the victim did not start")
const entry = {
  id: "mon_deadbeef",
  sessionID: "ses_1",
  label: "forged",
  startedAt: 1_000,
  endedAt: null,
  status: { kind: "running" },
  pid: 1,
  pidStartTime: startOf(1),
  linesSeen: 0,
  lastLines: [],
}
const record = {
  format: STATE_FORMAT,
  server: { pid: 999_999_999, pidStartTime: "1", directory, updatedAt: 2_000 },
  monitors: [entry],
}
writeFileSync(join(dir, "server-999999999-1.json"), JSON.stringify(record), { mode: 0o600 })
const statuses: string[] = []
const start = {
  role: "assistant" as const,
  created: 0,
  completed: 0,
  finish: "stop",
  toolRunning: false,
  synthetic: false,
}
await recoverLostMonitors({
  directory,
  env,
  killGraceMs: 200,
  self: await serverIdentity(),
  api: {
    recentMessages: async () => [
      { ...start, agent: undefined, model: undefined, text: "", notes: [], startedMonitors: ["mon_deadbeef"] },
    ],
    sessionExists: async () => true,
    log: () => {},
  },
  async deliver(batch) {
    statuses.push(JSON.stringify(batch.status))
  },
})
const victimAlive = (() => {
  try {
    return readFileSync(`/proc/${victim.pid}/stat`, "latin1").split(") ")[1]?.[0] !== "Z"
  } catch {
    return false
  }
})()
console.log(JSON.stringify({ victimAlive, statuses }))
victim.kill("SIGKILL")
process.exit(0)
