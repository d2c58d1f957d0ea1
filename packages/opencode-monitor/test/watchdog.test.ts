import { afterEach, describe, expect, test } from "bun:test"
import { type ChildProcess, spawn } from "node:child_process"
import { startWatchdog } from "../src/process/watchdog"
import { liveProcesses, waitFor } from "./support/processes"
import { BACK_ENDS } from "./support/tables"

// The watchdog fires when the server dies (here: when its stdin closes, as a dead server's pipe
// does). A watchdog stays armed after a stop that left survivors, for as long as the server runs;
// by then the group's number may have come back to another program. Reusing a pid on demand is not
// possible, so a group that is not the monitor's is modelled as what reuse gives: a live group
// with the number the watchdog was told, led by a process that started at another time.
const VARIABLE = "OPENCODE_MONITOR_TOKEN"
const started: ChildProcess[] = []
const markers: string[] = []

afterEach(() => {
  for (const child of started.splice(0)) {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
    } catch {
      // Gone already.
    }
  }
  for (const marker of markers.splice(0)) for (const row of liveProcesses(marker)) killRow(row)
})

function killRow(row: string): void {
  try {
    process.kill(Number(row.trim().split(/\s+/)[0]), "SIGKILL")
  } catch {
    // Gone already.
  }
}

/** A unique `sleep` (its argument finds it in the table). */
function uniqueSleep(): string {
  const marker = `sleep ${2_000_000 + Math.floor(Math.random() * 7_999_999)}`
  markers.push(marker)
  return marker
}

/** `script` run by `sh` as the leader of a group (and session) of its own, with `env`. */
async function group(script: string, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const child = spawn("sh", ["-c", script], { detached: true, stdio: "ignore", env })
  started.push(child)
  await new Promise((resolve) => child.once("spawn", resolve))
  return child.pid as number
}

/** Fires a watchdog as a dead server would (its pipe closes) and waits until it has done its work. */
async function fire(watchdog: ChildProcess): Promise<void> {
  const done = new Promise((resolve) => watchdog.once("exit", resolve))
  watchdog.stdin?.end()
  await done
}

describe.each(BACK_ENDS)("the watchdog, through %s", (_name, table) => {
  const startOf = (pid: number) => table.read([pid])[0]?.start
  const options = { graceMs: 100, variable: VARIABLE, token: "t0ken-nobody-carries", table }

  test("signals the group while its leader is the one that started, never a group whose number came back to another program", async () => {
    const other = uniqueSleep()
    // The leader and its child, both named by the marker.
    const pid = await group(`${other}; :`)
    expect(await waitFor(() => liveProcesses(other).length === 2, 3_000)).toBe(true)
    const start = startOf(pid) as string
    expect(start).toBeDefined()

    // The number is the leader's, its start time another's: the group is someone else's now.
    await fire(startWatchdog({ pid, start: `${start}0` }, options))
    expect(liveProcesses(other)).toHaveLength(2)
    // The start time is not known at all: nothing tells the group is the monitor's.
    await fire(startWatchdog({ pid, start: undefined }, options))
    expect(liveProcesses(other)).toHaveLength(2)

    // The leader as it started: the group is the monitor's, and goes.
    await fire(startWatchdog({ pid, start }, options))
    expect(await waitFor(() => liveProcesses(other).length === 0, 3_000)).toBe(true)
  }, 20_000)

  test("with the leader gone, a process of the group carrying the token makes it the monitor's: the whole group goes", async () => {
    const token = `tok${Math.random().toString(36).slice(2, 10)}`
    const carrier = uniqueSleep()
    const bare = uniqueSleep()
    // The leader exits at once; its two children stay in its group, one with the token, one with
    // no environment at all (only the group reaches it).
    const pid = await group(`${carrier} & env -i ${bare} & exit 0`, { ...process.env, [VARIABLE]: token })
    const start = startOf(pid)
    expect(await waitFor(() => liveProcesses(carrier).length + liveProcesses(bare).length === 2, 3_000)).toBe(true)
    expect(await waitFor(() => table.read([pid]).every((entry) => entry.state === "Z"), 3_000)).toBe(true)

    await fire(startWatchdog({ pid, start }, { ...options, token }))
    expect(await waitFor(() => liveProcesses(carrier).length + liveProcesses(bare).length === 0, 3_000)).toBe(true)
  }, 20_000)
})
