// test-runner: about 7 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
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

/** `script` run by `sh` (with `args`) as the leader of a group (and session) of its own, with `env`. */
async function group(script: string, env: NodeJS.ProcessEnv = process.env, args: string[] = []): Promise<number> {
  const child = spawn("sh", ["-c", script, "sh", ...args], { detached: true, stdio: "ignore", env })
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
  const startOf = async (pid: number) => (await table.read([pid]))[0]?.start
  const options = { graceMs: 100, variable: VARIABLE, token: "t0ken-nobody-carries", table }

  test("signals the group while its leader is the one that started, never a group whose number came back to another program", async () => {
    const other = uniqueSleep()
    // The leader and its child, both named by the marker.
    const pid = await group(`${other}; :`)
    expect(await waitFor(() => liveProcesses(other).length === 2, 3_000)).toBe(true)
    const start = (await startOf(pid)) as string
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
    const start = await startOf(pid)
    expect(await waitFor(() => liveProcesses(carrier).length + liveProcesses(bare).length === 2, 3_000)).toBe(true)
    expect(await waitFor(async () => (await table.read([pid])).every((entry) => entry.state === "Z"), 3_000)).toBe(true)

    await fire(startWatchdog({ pid, start }, { ...options, token }))
    expect(await waitFor(() => liveProcesses(carrier).length + liveProcesses(bare).length === 0, 3_000)).toBe(true)
  }, 20_000)

  test("its token is in neither its arguments (any user may read them) nor its environment (it would carry it)", async () => {
    const token = `tok${Math.random().toString(36).slice(2, 10)}`
    const pid = await group(`${uniqueSleep()}; :`)
    const watchdog = startWatchdog({ pid, start: await startOf(pid) }, { ...options, token })
    started.push(watchdog)
    const read = (file: string) => readFileSync(`/proc/${watchdog.pid}/${file}`, "latin1")
    // Until its exec, a just-forked child still shows this process's arguments.
    expect(await waitFor(() => read("cmdline").includes("opencode-monitor-watchdog"), 3_000)).toBe(true)
    expect(read("cmdline")).not.toContain(token)
    expect(read("environ")).not.toContain(token)
    expect((await table.findByEnvironment(`${VARIABLE}=${token}`)).found).toEqual([])
  }, 20_000)

  test("a process spelling the token only in its arguments is no carrier: it is not signalled, nor is its group", async () => {
    const token = `tok${Math.random().toString(36).slice(2, 10)}`
    const { [VARIABLE]: _none, ...clean } = process.env
    const spelled = uniqueSleep()
    const carrier = uniqueSleep()
    const pid = await group(`${spelled}; :`, clean, [`${VARIABLE}=${token}`])
    await group(`${carrier}; :`, { ...clean, [VARIABLE]: token })
    expect(await waitFor(() => liveProcesses(spelled).length + liveProcesses(carrier).length === 4, 3_000)).toBe(true)
    // Told the spelling group's number, with no start time that makes it the monitor's.
    await fire(startWatchdog({ pid, start: undefined }, { ...options, token }))
    expect(await waitFor(() => liveProcesses(carrier).length === 0, 3_000)).toBe(true)
    expect(liveProcesses(spelled)).toHaveLength(2)
  }, 20_000)
})
