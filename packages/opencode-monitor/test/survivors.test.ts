// test-runner: about 12 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { formatStatus } from "../src/codec"
import { defaultMonitorConfig } from "../src/config"
import { MonitorManager } from "../src/manager"
import { BatchCollector } from "./support/collect"
import { liveProcesses, uniqueMarker, waitFor } from "./support/processes"
import { startMonitor } from "./support/start"
import { BACK_ENDS } from "./support/tables"

// A process that survives SIGKILL, for real: one frozen by the cgroup v1 freezer does not die until
// it is thawed (it sits in state D). The project's machines (and CI) run as root with that freezer
// mounted; elsewhere this file fails and says why rather than pretending.
const FREEZER = "/sys/fs/cgroup/freezer"
let cgroup: string | undefined

afterEach(async () => {
  if (!cgroup) return
  // Thaw, so the frozen process takes its pending SIGKILL and the folder can go.
  writeFileSync(join(cgroup, "freezer.state"), "THAWED")
  const group = cgroup
  await waitFor(() => readFileSync(join(group, "tasks"), "utf8").trim() === "", 2_000)
  rmdirSync(cgroup)
  cgroup = undefined
})

function freeze(pid: number): void {
  if (!existsSync(join(FREEZER, "freezer.state")) && !existsSync(join(FREEZER, "tasks"))) {
    throw new Error(
      `this test needs the cgroup v1 freezer at ${FREEZER}, writable by root, to make a process survive SIGKILL`,
    )
  }
  cgroup = join(FREEZER, `omo-survivor-${process.pid}-${pid}`)
  mkdirSync(cgroup)
  writeFileSync(join(cgroup, "tasks"), String(pid))
  writeFileSync(join(cgroup, "freezer.state"), "FROZEN")
}

function childOf(parent: number): number | undefined {
  const children = readFileSync(`/proc/${parent}/task/${parent}/children`, "utf8").trim().split(/\s+/)
  return children[0] ? Number(children[0]) : undefined
}

describe.each(BACK_ENDS)("a process that survives the stop, verified through %s", (_name, table) => {
  test("is named by pid in the status after SIGKILL instead of a clean stop", async () => {
    const collector = new BatchCollector()
    const m = new MonitorManager(
      { ...defaultMonitorConfig(), kill_grace_ms: 200 },
      { onBatch: collector.onBatch, onEnded: collector.onEnded, processTable: table },
    )
    const marker = uniqueMarker("survivor")
    const info = await startMonitor(m, {
      sessionID: "s1",
      directory: process.cwd(),
      command: `sleep 1000; : ${marker}`,
    })
    const leader = m.snapshot().find((s) => s.id === info.id)?.pid as number
    expect(await waitFor(() => childOf(leader) !== undefined, 5_000)).toBe(true)
    const sleeper = childOf(leader) as number
    freeze(sleeper)

    const stopped = await m.stop("s1", info.id, "agent")
    const status = stopped?.info.status
    expect(status?.kind).toBe("stopped")
    expect(status && "survivors" in status ? status.survivors : undefined).toEqual([sleeper])
    expect(formatStatus(status as NonNullable<typeof status>)).toContain(`still running after SIGKILL: pid ${sleeper}`)
    // The watchdog stays armed for the survivor: if the server dies, it tries again.
    expect(liveProcesses(`opencode-monitor-watchdog ${leader} `)).toHaveLength(1)
  }, 30_000)
})
