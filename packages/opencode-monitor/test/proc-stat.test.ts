import { afterEach, describe, expect, test } from "bun:test"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { isSameLiveProcess, mayStillRun, processStartTime, readProcStat } from "../src/process/proc-stat"
import { waitFor } from "./support/processes"

const groups: number[] = []
afterEach(() => {
  for (const pgid of groups.splice(0)) {
    try {
      process.kill(-pgid, "SIGKILL")
    } catch {}
  }
})

/** A `sleep` whose child exits and is never reaped: a zombie, as a SIGKILLed server is until reaped. */
async function zombie(): Promise<number> {
  const parent = spawn("sh", ["-c", "sleep 0 & echo $!; exec sleep 30"], {
    detached: true,
    stdio: ["ignore", "pipe", "ignore"],
  })
  groups.push(parent.pid as number)
  const pid = await new Promise<number>((resolve) =>
    parent.stdout?.once("data", (chunk) => resolve(Number(String(chunk).trim()))),
  )
  expect(await waitFor(() => readProcStat(pid)?.state === "Z", 5_000)).toBe(true)
  return pid
}

describe("process identity from /proc/<pid>/stat", () => {
  test("this process is itself, with its own start time; another start time is another process", () => {
    const start = processStartTime(process.pid)
    expect(start).toMatch(/^\d+$/)
    expect(isSameLiveProcess(process.pid, start)).toBe(true)
    expect(isSameLiveProcess(process.pid, `${Number(start) + 1}`)).toBe(false)
    expect(isSameLiveProcess(process.pid, undefined)).toBe(false)
    expect(mayStillRun(process.pid, start)).toBe(true)
    expect(mayStillRun(process.pid, `${Number(start) + 1}`)).toBe(false)
  })

  test("a pid that does not exist does not run", () => {
    expect(readProcStat(999_999_999)).toBeUndefined()
    expect(mayStillRun(999_999_999, undefined)).toBe(false)
    expect(isSameLiveProcess(999_999_999, "1")).toBe(false)
  })

  test("a zombie does not run, even with its own start time", async () => {
    const pid = await zombie()
    const start = processStartTime(pid)
    expect(mayStillRun(pid, start)).toBe(false)
    expect(isSameLiveProcess(pid, start)).toBe(false)
  })

  test("the start time survives a command name with spaces and parentheses", async () => {
    // The kernel's command name (field 2) is the executable's file name: make it hostile.
    const dir = mkdtempSync(join(tmpdir(), "omo-stat-"))
    const odd = join(dir, "a) b 1 2 (c")
    symlinkSync(Bun.which("sleep") as string, odd)
    const child = spawn(odd, ["30"], { detached: true, stdio: "ignore" })
    groups.push(child.pid as number)
    expect(await waitFor(() => readProcStat(child.pid as number)?.state === "S", 5_000)).toBe(true)
    const stat = readProcStat(child.pid as number)
    expect(stat?.startTime).toMatch(/^\d+$/)
    expect(Number(stat?.startTime)).toBeGreaterThanOrEqual(Number(processStartTime(process.pid)))
    expect(isSameLiveProcess(child.pid as number, stat?.startTime)).toBe(true)
    rmSync(dir, { recursive: true, force: true })
  })
})
