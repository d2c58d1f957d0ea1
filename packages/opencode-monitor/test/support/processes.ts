import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"

/** Live (non-zombie) processes whose command line contains `marker`, from the real process table. */
export function liveProcesses(marker: string): string[] {
  const ps = spawnSync("ps", ["-eo", "pid=,stat=,args="], { encoding: "utf8" })
  return ps.stdout
    .split("\n")
    .filter((row) => row.includes(marker) && !row.includes("ps -eo"))
    .filter((row) => !/^\s*\d+\s+Z/.test(row))
}

/** A string unique to one test, to find its processes in the table. */
export function uniqueMarker(name: string): string {
  return `${name}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
}

export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  pollMs = 20,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await condition()) return true
    await new Promise((r) => setTimeout(r, pollMs))
  }
  return condition()
}

/** SIGKILL to a process this test started and to its direct children (cleanup after a failure). */
export function killWithChildren(pid: number): void {
  let children: number[] = []
  try {
    children = readFileSync(`/proc/${pid}/task/${pid}/children`, "latin1").trim().split(" ").filter(Boolean).map(Number)
  } catch {
    // Already gone.
  }
  for (const target of [pid, ...children]) {
    try {
      process.kill(target, "SIGKILL")
    } catch {
      // Already gone.
    }
  }
}
