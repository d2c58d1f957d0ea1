// test-runner: about 4 s (scripts/test.ts deals the unit files into two jobs by it)
import { afterEach, describe, expect, test } from "bun:test"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import {
  createProcessTable,
  type EnvironmentSearch,
  mayStillRun,
  readProcess,
  searchedTogether,
} from "../src/process/process-table"
import { createPsTable, environmentListingFlag, parseLsof, parseTable } from "../src/process/ps-table"
import { settle } from "./support/fake-session-api"
import { waitFor } from "./support/processes"
import { BACK_ENDS } from "./support/tables"

const groups: number[] = []
afterEach(() => {
  for (const pgid of groups.splice(0)) {
    try {
      process.kill(-pgid, "SIGKILL")
    } catch {}
  }
})

function detached(file: string, args: string[], env: NodeJS.ProcessEnv = process.env) {
  const child = spawn(file, args, { detached: true, stdio: ["ignore", "pipe", "ignore"], env })
  groups.push(child.pid as number)
  return child
}

describe.each(BACK_ENDS)("the process table through %s", (_name, table) => {
  /** A `sleep` whose child exits and is never reaped: a zombie, as a SIGKILLed server is until reaped. */
  async function zombie(): Promise<{ pid: number; start: string | undefined }> {
    const parent = detached("sh", ["-c", "sleep 0 & echo $!; exec sleep 30"])
    const pid = await new Promise<number>((resolve) =>
      parent.stdout?.once("data", (chunk) => resolve(Number(String(chunk).trim()))),
    )
    // Its start time from the read that saw it a zombie (ps is asked once less under load).
    let start: string | undefined
    const isZombie = async () => {
      const entry = await readProcess(pid, table)
      start = entry?.start
      return entry?.state === "Z"
    }
    expect(await waitFor(isZombie, 15_000)).toBe(true)
    return { pid, start }
  }

  test("this process is itself, with its own start time; another start time is another process", async () => {
    const start = (await readProcess(process.pid, table))?.start as string
    expect(start.length).toBeGreaterThan(0)
    expect(await mayStillRun(process.pid, start, table)).toBe(true)
    expect(await mayStillRun(process.pid, `${start}1`, table)).toBe(false)
    expect(await mayStillRun(process.pid, undefined, table)).toBe(true)
  })

  test("a pid that does not exist does not run", async () => {
    expect(await readProcess(999_999_999, table)).toBeUndefined()
    expect(await readProcess(-1, table)).toBeUndefined()
    expect(await mayStillRun(999_999_999, undefined, table)).toBe(false)
    expect(await mayStillRun(999_999_999, "1", table)).toBe(false)
  })

  // As long as zombie()'s wait: on a loaded machine ps may take seconds to show the zombie.
  test("a zombie does not run, even with its own start time", async () => {
    const { pid, start } = await zombie()
    expect(start).toBeDefined()
    expect(await mayStillRun(pid, start, table)).toBe(false)
  }, 20_000)

  test("a child started later has a start time of its own, not older than this process's", async () => {
    // ps tells start times apart by the second: this process must be older than that.
    expect(await waitFor(() => process.uptime() > 1.1, 5_000, 50)).toBe(true)
    const child = detached("sleep", ["30"])
    const pid = child.pid as number
    const start = (await readProcess(pid, table))?.start as string
    expect(start).not.toBe((await readProcess(process.pid, table))?.start as string)
    expect(await mayStillRun(pid, start, table)).toBe(true)
    expect(await mayStillRun(pid, (await readProcess(process.pid, table))?.start, table)).toBe(false)
  })

  test("the start time survives a command name with spaces and parentheses", async () => {
    // The kernel's command name (/proc's field 2) is the executable's file name: make it hostile.
    const dir = mkdtempSync(join(tmpdir(), "omo-stat-"))
    const odd = join(dir, "a) b 1 2 (c")
    symlinkSync(Bun.which("sleep") as string, odd)
    const child = detached(odd, ["30"])
    expect(await waitFor(async () => (await readProcess(child.pid as number, table))?.state === "S", 5_000)).toBe(true)
    const entry = await readProcess(child.pid as number, table)
    expect(entry?.ppid).toBe(process.pid)
    expect(await mayStillRun(child.pid as number, entry?.start, table)).toBe(true)
    rmSync(dir, { recursive: true, force: true })
  })

  test("a detached child leads its own session and group; its child leads neither", async () => {
    const leader = detached("sh", ["-c", "sleep 30 & echo $!; wait"])
    const inner = await new Promise<number>((resolve) =>
      leader.stdout?.once("data", (chunk) => resolve(Number(String(chunk).trim()))),
    )
    const leads = async (pid: number) => {
      const entry = await readProcess(pid, table)
      return entry?.sessionLeader === true && entry.pgrp === pid
    }
    expect(await leads(leader.pid as number)).toBe(true)
    expect(await leads(inner)).toBe(false)
    expect((await readProcess(inner, table))?.pgrp).toBe(leader.pid as number)
    expect(await leads(process.pid)).toBe(false)
  })

  test("the environment search finds exactly the processes carrying the entry", async () => {
    const token = `OMO_TABLE_TEST=${Math.random().toString(36).slice(2)}`
    const [name, value] = token.split("=") as [string, string]
    const carrier = detached("sleep", ["30"], { ...process.env, [name]: value })
    const longer = detached("sleep", ["30"], { ...process.env, [name]: `${value}x` })
    // Until the exec, a just-forked child still shows this process's environment.
    for (const child of [carrier, longer]) {
      await waitFor(async () => (await table.environmentValue(child.pid as number, name)) !== undefined, 2_000)
    }
    const search = await table.findByEnvironment(token)
    expect(search.found).toEqual([carrier.pid as number])
    // Another job's process that execs between ps's two listings is unreadable (it may carry the
    // entry, so it is named); these two are read whole.
    expect(search.unreadable.filter((pid) => pid === carrier.pid || pid === longer.pid)).toEqual([])
    expect(await table.environmentValue(carrier.pid as number, name)).toBe(value)
    expect(await table.environmentValue(longer.pid as number, name)).toBe(`${value}x`)
    expect(await table.environmentValue(carrier.pid as number, "OMO_NOT_SET_ANYWHERE")).toBeUndefined()
    expect(await table.environmentValue(999_999_999, name)).toBeUndefined()
    // A command line that spells the variable does not stand in for the environment.
    const forger = detached("sh", ["-c", "sleep 30", `${name}=forged`], { ...process.env, [name]: value })
    await waitFor(async () => (await table.environmentValue(forger.pid as number, name)) !== undefined, 2_000)
    expect(await table.environmentValue(forger.pid as number, name)).toBe(value)
  })

  test("a command line that spells the entry is not an environment: that process carries nothing", async () => {
    const token = `OMO_TABLE_TEST=${Math.random().toString(36).slice(2)}`
    const [name, value] = token.split("=") as [string, string]
    const { [name]: _none, ...clean } = process.env
    const spelled = detached("sh", ["-c", "sleep 30", token], clean)
    const carrier = detached("sleep", ["30"], { ...process.env, [name]: value })
    await waitFor(async () => (await table.environmentValue(carrier.pid as number, name)) === value, 2_000)
    // Until the exec, a just-forked child still shows this process's environment.
    await waitFor(async () => (await table.commandName(spelled.pid as number)) === "sh", 2_000)
    expect((await table.findByEnvironment(token)).found).toEqual([carrier.pid as number])
    expect(await table.environmentValue(spelled.pid as number, name)).toBeUndefined()
  })

  test("an entry after more environment than ps lists whole: found (/proc) or the process reported unreadable (ps)", async () => {
    const token = `OMO_TABLE_TEST=${Math.random().toString(36).slice(2)}`
    const [name, value] = token.split("=") as [string, string]
    // Two 90 KB variables before the entry: procps ends each row at 128 KiB.
    const pad = (c: string) => c.repeat(90_000)
    const big = detached("sleep", ["30"], { ...process.env, OMO_PAD_A: pad("a"), OMO_PAD_B: pad("b"), [name]: value })
    // The same, the entry first: in a cut row what comes before the cut still counts.
    const early = detached("sleep", ["30"], { [name]: value, ...process.env, OMO_PAD_A: pad("a"), OMO_PAD_B: pad("b") })
    const [pid, earlyPid] = [big.pid as number, early.pid as number]
    for (const p of [pid, earlyPid]) await waitFor(async () => (await table.commandName(p)) === "sleep", 2_000)
    const search = await table.findByEnvironment(token)
    expect(await table.environmentValue(earlyPid, name)).toBe(value)
    if (table.cheap) {
      expect([...search.found].sort()).toEqual([pid, earlyPid].sort())
      expect(search.unreadable).toEqual([])
      expect(await table.environmentValue(pid, name)).toBe(value)
    } else {
      expect(search.found).toEqual([earlyPid])
      expect(search.unreadable).toContain(pid)
      expect(search.unreadable).not.toContain(earlyPid)
      expect(await table.environmentValue(pid, name)).toBeUndefined()
    }
  })

  test("the holders of a process's output pipe are found", async () => {
    const writer = spawn("sh", ["-c", "sleep 30 & echo forked; exec sleep 30"], {
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    })
    groups.push(writer.pid as number)
    // Once it printed, the background sleep exists (and holds both pipes).
    await new Promise((resolve) => writer.stdout?.once("data", resolve))
    const targets = await table.outputTargets(writer.pid as number)
    expect(targets.length).toBeGreaterThan(0)
    const holders = await table.findHolders(targets)
    expect(holders).toContain(writer.pid as number)
    expect(holders.length).toBe(2) // the shell (exec'd into sleep) and its background sleep
    expect(holders).not.toContain(process.pid)
  })
})

describe("the ps back end", () => {
  test("never runs ps or lsof on the event loop: a timer due at once fires before any of its reads answers", async () => {
    const table = createPsTable()
    const reads: [string, () => Promise<unknown>][] = [
      ["read", () => table.read([process.pid])],
      ["scan", () => table.scan()],
      ["findByEnvironment", () => table.findByEnvironment("OMO_NOT_SET_ANYWHERE=1")],
      ["environmentValue", () => table.environmentValue(process.pid, "PATH")],
      ["commandName", () => table.commandName(process.pid)],
      ["outputTargets", () => table.outputTargets(process.pid)],
    ]
    const firstToAnswer: string[] = []
    for (const [name, read] of reads) {
      let fired = false
      setTimeout(() => {
        fired = true
      }, 0)
      await read()
      firstToAnswer.push(`${name}: ${fired ? "timer" : "read"}`)
    }
    expect(firstToAnswer).toEqual(reads.map(([name]) => `${name}: timer`))
    expect(table.cheap).toBeUndefined()
  })

  test("a ps that gives no table is an error, never a system where every process is gone", () => {
    const dir = mkdtempSync(join(tmpdir(), "omo-ps-"))
    try {
      const scan = (path: string) => {
        const code = `import(${JSON.stringify(resolve(import.meta.dir, "../src/process/ps-table.ts"))}).then(({ createPsTable }) =>
          createPsTable().scan().then((e) => console.log("entries", e.length), (e) => console.log("error:", e.message)))`
        return Bun.spawnSync([process.execPath, "-e", code], { env: { ...process.env, PATH: path } }).stdout.toString()
      }
      const answers = [scan(dir)]
      writeFileSync(join(dir, "ps"), "#!/bin/sh\nexit 0\n", { mode: 0o755 })
      answers.push(scan(dir))
      const error = "error: ps -A listed no processes: is ps installed and on PATH (procps on Linux)?\n"
      expect(answers).toEqual([error, error])
      expect(scan(process.env.PATH ?? "")).toMatch(/^entries [1-9]/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test("without lsof, pipe holders are a documented gap: none found, nothing claimed", async () => {
    const table = createPsTable({ lsof: "/nonexistent/lsof" })
    const writer = detached("sleep", ["30"])
    expect(await table.outputTargets(writer.pid as number)).toEqual([])
    expect(await table.findHolders(["FIFO:0xd:1"])).toEqual([])
  })

  test("asks for the environment with the flag of the platform: procps's BSD `e`, macOS's -E", () => {
    expect(environmentListingFlag("linux")).toBe("e")
    expect(environmentListingFlag("darwin")).toBe("-E")
    expect(createPsTable({ platform: "darwin" }).watchdogFunctions("V").join("\n")).toContain("-o command= -E")
  })

  test("reads procps's and macOS's rows alike; a row that does not parse is skipped", () => {
    const rows = [
      "    1     0     1 Ss   Tue Dec  1 11:40:24 2026",
      "  812   811   811 S+   Tue Dec  1 11:47:09 2026",
      "  913     1   913 Z    Tue Dec  1 11:47:10 2026",
      "garbage line",
      "  99 x 1 S Tue",
    ].join("\n")
    expect(parseTable(rows)).toEqual([
      { pid: 1, ppid: 0, pgrp: 1, sid: undefined, sessionLeader: true, state: "S", start: "TueDec111:40:242026" },
      {
        pid: 812,
        ppid: 811,
        pgrp: 811,
        sid: undefined,
        sessionLeader: false,
        state: "S",
        start: "TueDec111:47:092026",
      },
      { pid: 913, ppid: 1, pgrp: 913, sid: undefined, sessionLeader: false, state: "Z", start: "TueDec111:47:102026" },
    ])
  })

  test("lsof's field output gives one identity per open pipe or socket, per process", () => {
    const text = [
      "p10",
      "f1",
      "tFIFO",
      "D0xd",
      "i3316",
      "f2",
      "tunix",
      "D0xffff1",
      "i77",
      "p11",
      "f5",
      "tFIFO",
      "D0xd",
      "i3316",
    ]
    expect([...parseLsof(text.join("\n"))]).toEqual([
      [10, ["FIFO:0xd:3316", "unix:0xffff1:77"]],
      [11, ["FIFO:0xd:3316"]],
    ])
  })

  test("is what a system without /proc gets; /proc where it is readable", () => {
    // Only /proc reads cheaply (synchronously).
    expect(createProcessTable("ps").cheap).toBeUndefined()
    expect(createProcessTable().cheap).toBeDefined()
  })
})

describe("environment searches asked together", () => {
  /** A search the test answers by hand; `asked` resolves at its next call. */
  function searchByHand() {
    const calls: { entries: string[]; answer: (result: Error | EnvironmentSearch[]) => void }[] = []
    let called = () => {}
    const search = (entries: string[]) =>
      new Promise<EnvironmentSearch[]>((resolve, reject) => {
        calls.push({ entries, answer: (result) => (result instanceof Error ? reject(result) : resolve(result)) })
        called()
      })
    const asked = () => new Promise<void>((resolve) => (called = resolve))
    return { calls, search, asked }
  }
  /** What a caller got by the time the promise jobs now due have run: never "waiting" once its search ended. */
  const outcome = (search: Promise<EnvironmentSearch>) =>
    Promise.race([
      search.then(
        ({ found }) => `found ${found}`,
        (error: Error) => `failed: ${error.message}`,
      ),
      settle().then(() => "waiting"),
    ])

  test("a search that fails fails its callers, and the searches asked meanwhile and later still run", async () => {
    const { calls, search, asked } = searchByHand()
    const find = searchedTogether(search)
    let next = asked()
    const first = [find("A=1"), find("B=2")]
    await next
    next = asked()
    const meanwhile = find("C=3")
    calls[0]?.answer(new Error("ps could not run"))
    expect(await Promise.all(first.map(outcome))).toEqual(["failed: ps could not run", "failed: ps could not run"])
    await next
    calls[1]?.answer([{ found: [3], unreadable: [] }])
    expect(await outcome(meanwhile)).toBe("found 3")
    next = asked()
    const later = find("D=4")
    await next
    calls[2]?.answer([{ found: [4], unreadable: [] }])
    expect(await outcome(later)).toBe("found 4")
    expect(calls.map(({ entries }) => entries)).toEqual([["A=1", "B=2"], ["C=3"], ["D=4"]])
  })
})
