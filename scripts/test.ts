/**
 * `npm test`: the whole suite. The plugin's unit tests run in two `bun test`s; each live file (a real
 * opencode server of its own) runs in its own `bun test` process, several at once, since a live
 * scenario mostly waits on timers and the server. The longest start first, so the suite takes about
 * its total divided by the jobs, not that plus its longest file: a file that runs longer than
 * SHORT_SECONDS says so in a line `// test-runner: about N s` (its time on 2 busy cores). Output of
 * each file is printed whole when it ends, so parallel runs never interleave; the last line is the
 * plain `N passed, N failed` count.
 *
 * The live files run on the newest tested opencode release, and the core subset below once more on
 * the oldest (the releases are TESTED_OPENCODE in the plugin's src/host-check.ts, each a
 * pinned devDependency). `OPENCODE_VERSION` tells the harness which binary to start.
 *
 *   npm test                          everything
 *   npm test -- packages/live-qa      only files under these paths
 *   TEST_JOBS=2 npm test              at most 2 files at once (default 4)
 *   OPENCODE_VERSION=1.18.32 npm run test:live   every live file on that tested release
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { TESTED_OPENCODE } from "../packages/opencode-monitor/src/host-check.ts"

const ROOT = resolve(import.meta.dir, "..")
const JOBS = Math.max(1, Number(process.env.TEST_JOBS ?? 4))

type Job = { name: string; files: string[]; seconds: number; opencode?: string }

/** What a live file without a `// test-runner: about N s` line is taken to run. */
const SHORT_SECONDS = 30
/**
 * The plugin's unit tests run as UNIT_JOBS jobs, so the one that waits on real processes longest is
 * not the suite's tail. Files are dealt out by their time: a slow one says it in the same
 * `// test-runner: about N s` line as a live file; every other file is taken to run UNIT_FILE_SECONDS.
 */
const UNIT_JOBS = 2
const UNIT_FILE_SECONDS = 2

export const NEWEST_OPENCODE = TESTED_OPENCODE[TESTED_OPENCODE.length - 1] as string
export const OLDEST_OPENCODE = TESTED_OPENCODE[0] as string
/**
 * The core run again on the oldest tested release: the exit wake, install by name from the local
 * registry (the only route opencode's version gate applies to), and the TUI. The rest of the live
 * files run on the newest only, which keeps `npm test` short; a release
 * added to TESTED_OPENCODE gets one full `OPENCODE_VERSION=<release> npm run test:live` first.
 */
export const CORE_ON_OLDEST = [
  "packages/live-qa/test/terminal-wake.test.ts",
  "packages/live-qa/test/install-by-name.test.ts",
  "packages/live-qa/test/tui.test.ts",
]
type Result = { job: Job; pass: number; fail: number; code: number; seconds: number; cpu: number; output: string }

function testFiles(dir: string): string[] {
  const out: string[] = []
  for (const entry of readdirSync(dir)) {
    if (entry === "node_modules" || entry.startsWith(".")) continue
    const path = join(dir, entry)
    if (statSync(path).isDirectory()) out.push(...testFiles(path))
    else if (entry.endsWith(".test.ts")) out.push(path)
  }
  return out.sort()
}

function jobs(filters: string[]): Job[] {
  const wanted = (file: string) => filters.length === 0 || filters.some((f) => relative(ROOT, file).startsWith(f))
  const unit = testFiles(join(ROOT, "packages/opencode-monitor/test")).filter(wanted)
  const others = testFiles(join(ROOT, "packages"))
    .filter((f) => !f.startsWith(join(ROOT, "packages/opencode-monitor/")))
    .filter(wanted)
  // OPENCODE_VERSION given: every live file on that release, once.
  const release = process.env.OPENCODE_VERSION ?? NEWEST_OPENCODE
  const list: Job[] = others.map((file) => ({
    name: `${relative(ROOT, file)} @${release}`,
    files: [file],
    seconds: expectedSeconds(file),
    opencode: release,
  }))
  if (!process.env.OPENCODE_VERSION && OLDEST_OPENCODE !== NEWEST_OPENCODE) {
    for (const file of CORE_ON_OLDEST.map((f) => join(ROOT, f)).filter(wanted)) {
      list.push({
        name: `${relative(ROOT, file)} @${OLDEST_OPENCODE}`,
        files: [file],
        seconds: expectedSeconds(file),
        opencode: OLDEST_OPENCODE,
      })
    }
  }
  list.push(...unitJobs(unit))
  // Longest first: the last jobs to start are short, so the workers finish close together.
  return list.sort((a, b) => b.seconds - a.seconds)
}

/** The unit files dealt into UNIT_JOBS jobs of about equal time: the longest file first, to the least loaded job. */
function unitJobs(files: string[]): Job[] {
  const seconds = (file: string) => expectedSeconds(file, UNIT_FILE_SECONDS)
  const out = Array.from({ length: Math.min(UNIT_JOBS, files.length) }, (_, i) => ({
    name: `packages/opencode-monitor (unit ${i + 1})`,
    files: [] as string[],
    seconds: 0,
  }))
  for (const file of [...files].sort((a, b) => seconds(b) - seconds(a))) {
    const job = out.reduce((least, j) => (j.seconds < least.seconds ? j : least))
    job.files.push(file)
    job.seconds += seconds(file)
  }
  return out
}

/** A file's `// test-runner: about N s`, else `otherwise`. */
function expectedSeconds(file: string, otherwise = SHORT_SECONDS): number {
  const said = readFileSync(file, "utf8").match(/^\/\/ test-runner: about (\d+) s\b/m)
  return said ? Number(said[1]) : otherwise
}

async function run(job: Job): Promise<Result> {
  const started = Date.now()
  const child = Bun.spawn({
    cmd: [process.execPath, "test", "--timeout", "120000", ...job.files],
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, FORCE_COLOR: "0", ...(job.opencode ? { OPENCODE_VERSION: job.opencode } : {}) },
  })
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ])
  const output = stdout + stderr
  // CPU time of the file's process and the servers and commands it waited for.
  const cpu = Number(child.resourceUsage()?.cpuTime.total ?? 0) / 1e6
  const count = (word: string) => Number(output.match(new RegExp(`^\\s*(\\d+) ${word}$`, "m"))?.[1] ?? 0)
  let fail = count("fail")
  // A file that crashed or timed out before bun printed its counts still counts as a failure.
  if (code !== 0 && fail === 0) fail = 1
  return { job, pass: count("pass"), fail, code, seconds: (Date.now() - started) / 1000, cpu, output }
}

async function main(): Promise<number> {
  const queue = jobs(process.argv.slice(2))
  if (queue.length === 0) {
    console.error("no test files match")
    return 1
  }
  console.log(`running ${queue.length} test jobs, ${JOBS} at a time, longest first`)
  const started = Date.now()
  const results: Result[] = []
  const worker = async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      const result = await run(job)
      results.push(result)
      console.log(
        `\n===== ${job.name}: ${result.pass} pass, ${result.fail} fail (${result.seconds.toFixed(0)} s, ${result.cpu.toFixed(0)} CPU-s)`,
      )
      console.log(result.output.trimEnd())
    }
  }
  await Promise.all(Array.from({ length: JOBS }, worker))
  console.log("\n===== summary")
  for (const r of results) {
    console.log(
      `${r.fail === 0 ? "ok  " : "FAIL"} ${r.job.name}: ${r.pass} pass, ${r.fail} fail, ${r.seconds.toFixed(0)} s, ${r.cpu.toFixed(0)} CPU-s`,
    )
  }
  const pass = results.reduce((n, r) => n + r.pass, 0)
  const fail = results.reduce((n, r) => n + r.fail, 0)
  const cpu = results.reduce((n, r) => n + r.cpu, 0)
  console.log(`\nall jobs in ${((Date.now() - started) / 1000).toFixed(0)} s, ${cpu.toFixed(0)} CPU-s`)
  console.log(`\n${pass} passed, ${fail} failed`)
  return fail === 0 && results.every((r) => r.code === 0) ? 0 : 1
}

if (import.meta.main) process.exitCode = await main()
