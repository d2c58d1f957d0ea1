// test-runner: about 87 s (scripts/test.ts starts the longest first)
/**
 * Permission parity: for every command string of the corpus, under three rule sets, the scripted
 * model gives the same string to opencode's `bash` tool and to `monitor_start` in one step; the
 * verdicts must match — tool part status, and the `permission.asked` kinds with their "always"
 * offers. Rows with `hidden` commands are the stricter rows of docs/security.md: commands whose real
 * program the bash tool cannot see (`sh -c`, `eval`, `xargs`, `find -exec`, wrappers and prefixes).
 * There monitor_start must be at least as strict and ask the same kinds; two more rule sets, on
 * those rows only, show it stricter: everything asked, it asks each hidden command as an extra
 * `bash` pattern; hidden programs denied, it refuses what the bash tool lets through. Prints the
 * tables (the proof). One server and one project, whose opencode.json gives each rule set an agent
 * of its own (its `permission`), and each step runs as that agent: the rules both tools meet. The
 * first three rule sets run in parallel; up to 16 commands share one step (each call's outcome is
 * read by its callID); about a minute on 2 busy cores.
 */
import { afterAll, expect, test } from "bun:test"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import {
  allRuns,
  askSignature,
  autoReplyOnce,
  COMMANDS_PER_STEP,
  type DiffRow,
  differentialAgent,
  renderTable,
  runDifferential,
  strictness,
} from "../src/differential.ts"
import { type MonitorQA, startMonitorQA } from "../src/monitor-qa.ts"

/** `hidden`: the simple commands hidden inside, which monitor_start asks as extra `bash` patterns. */
type Case = { command: string; hidden?: string[] }

// Harmless by construction: `./x` never exists, `../…` paths are in the test's own temp dir,
// network only to a closed loopback port, `sudo -n` never prompts and `doas` may be missing.
const CORPUS: Case[] = [
  { command: "echo a; rm -rf ./x" },
  { command: "true && rm -rf ./x" },
  { command: " rm -rf ./x" },
  { command: "rm -rf ./x   " },
  { command: "ls | rm -rf ./x" },
  { command: "echo a; touch f" },
  { command: "cat ../outside.txt" },
  { command: "echo a && ls" },
  { command: "echo a || rm -rf ./x" },
  { command: "echo a;rm -rf ./x" },
  { command: "(cd sub 2>/dev/null; rm -rf ./x)" },
  { command: "{ echo a; rm -rf ./x; }" },
  { command: "echo $(rm -rf ./x)" },
  { command: "echo `rm -rf ./x`" },
  { command: "cat <(rm -rf ./x)" },
  { command: "x=$(rm -rf ./x)" },
  { command: "FOO=1 rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "FOO=secret echo hi" },
  { command: "echo 'rm -rf ./x'" },
  { command: 'echo "a; rm -rf ./x"' },
  { command: "ls *.md" },
  { command: "rm -rf ./x*" },
  { command: "cat /etc/hostname" },
  { command: "cat ~/.profile" },
  { command: "rm -rf ../nothing-here-x" },
  { command: "cd .. && ls" },
  { command: "cd sub" },
  { command: "# only a comment" },
  { command: "cat <<EOF\nhello\nEOF" },
  { command: "cat <<EOF\n$(rm -rf ./x)\nEOF" },
  { command: "echo a \\\n  b" },
  { command: "echo a\nrm -rf ./x" },
  { command: "if true; then rm -rf ./x; fi" },
  { command: "for i in 1 2; do echo $i; done" },
  { command: "echo a > out.txt" },
  { command: "git status" },
  { command: "git status; curl -s http://127.0.0.1:9/x | sh" },
  { command: "git -C . log -1 --oneline" },
  { command: "printf '%s\\n' a b | grep a" },
  { command: "echo hi\t| cat" },
  { command: "$CMD ./x" },
  { command: "command rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "exec rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "builtin echo hi", hidden: ["echo hi"] },
  { command: "env FOO=1 rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "nohup rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "sh -c 'rm -rf ./x'", hidden: ["rm -rf ./x"] },
  { command: 'bash -c "echo a; rm -rf ./x"', hidden: ["echo a", "rm -rf ./x"] },
  { command: "eval 'rm -rf ./x'", hidden: ["rm -rf ./x"] },
  { command: "printf ./x | xargs rm -rf", hidden: ["rm -rf"] },
  { command: "find . -name nothing-here-x -exec rm -rf {} \\;", hidden: ["rm -rf {}"] },
  { command: "time rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "sudo -n rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "doas rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "nice -n 10 rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "timeout 5 rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "setsid rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "stdbuf -o0 rm -rf ./x", hidden: ["rm -rf ./x"] },
  { command: "ionice -c 3 rm -rf ./x", hidden: ["rm -rf ./x"] },
]

const RULE_SETS: Record<string, Record<string, string>> = {
  "allow by default, with denies": { "*": "allow", "rm *": "deny", "curl *": "deny" },
  "ask by default, with allows": {
    "*": "ask",
    "echo *": "allow",
    "ls *": "allow",
    "git status *": "allow",
    "rm *": "deny",
  },
  "deny by default": { "*": "deny", "echo *": "allow", "ls *": "allow", "cat *": "allow", true: "allow" },
}

/** The stricter rows' own rule sets: everything asked, and the hidden programs denied. */
const EVERYTHING_ASKED = { "*": "ask" }
const HIDDEN_DENIED = { "*": "allow", "rm *": "deny", "echo *": "deny" }

const STRICTER = CORPUS.filter((c) => c.hidden !== undefined)
const hiddenIn = (row: DiffRow) => CORPUS.find((c) => c.command === row.command)?.hidden

/** Each rule set of the file is an agent of the project: `rules-1`, `rules-2`, … */
const ALL_RULE_SETS = [...Object.values(RULE_SETS), EVERYTHING_ASKED, HIDDEN_DENIED]
const agentOf = (rules: Record<string, string>) => `rules-${ALL_RULE_SETS.indexOf(rules) + 1}`

let project: Promise<{ qa: MonitorQA; stopReplying: () => void }> | undefined
afterAll(async () => {
  const started = await project?.catch(() => undefined)
  started?.stopReplying()
  await started?.qa.stop().catch(() => undefined)
})

/** Same verdict and same questions; for `stricter` rows, monitor_start at least as strict. */
function judge(row: DiffRow, stricter: boolean): string {
  const sameAsks = askSignature(row.bash) === askSignature(row.monitor)
  if (row.bash.verdict === row.monitor.verdict && sameAsks) return "yes"
  if (!stricter) return "NO"
  const kinds = (o: DiffRow["bash"]) => new Set(o.asks.map((a) => a.permission))
  const covers = [...kinds(row.bash)].every((k) => kinds(row.monitor).has(k) || row.monitor.verdict === "denied")
  return strictness(row.monitor) >= strictness(row.bash) && covers ? "stricter" : "NO"
}

/**
 * The file's project, started by its first use: an agent per rule set in its opencode.json, every
 * permission request answered "once" (never "always", so no rule set's answer outlives its call).
 */
function ruleSetsProject(): Promise<{ qa: MonitorQA; stopReplying: () => void }> {
  project ??= (async () => {
    const agents = Object.fromEntries(
      ALL_RULE_SETS.map((rules) => [agentOf(rules), { mode: "primary", permission: { bash: rules } }]),
    )
    const qa = await startMonitorQA({
      permission: {},
      script: differentialAgent(),
      pluginOptions: { max_monitors_per_session: COMMANDS_PER_STEP },
      projectConfig: { agent: agents },
    })
    mkdirSync(join(qa.server.directory, "sub"), { recursive: true })
    writeFileSync(join(qa.server.directory, "..", "outside.txt"), "outside\n")
    return { qa, stopReplying: autoReplyOnce(qa) }
  })()
  return project
}

async function runRuleSet(
  name: string,
  rules: Record<string, string>,
  cases: Case[] = CORPUS,
): Promise<{ name: string; rows: DiffRow[] }> {
  const { qa } = await ruleSetsProject()
  const commands = cases.map((c) => c.command)
  return { name, rows: await runDifferential(qa, commands, { deleteSessions: true, agent: agentOf(rules) }) }
}

test("monitor_start gets the bash tool's verdict for every command under every rule set", async () => {
  const results = await allRuns(Object.entries(RULE_SETS).map(([name, rules]) => runRuleSet(name, rules)))
  const failures: string[] = []
  for (const { name, rows } of results) {
    const marks = (row: DiffRow) => judge(row, hiddenIn(row) !== undefined)
    console.log(`\n${renderTable(`${name}: ${JSON.stringify(RULE_SETS[name])}`, rows, marks)}\n`)
    for (const row of rows) {
      if (marks(row) !== "NO") continue
      failures.push(
        `${name}: ${JSON.stringify(row.command)}\n  bash: ${JSON.stringify(row.bash)}\n  monitor: ${JSON.stringify(row.monitor)}`,
      )
    }
  }
  expect(failures).toEqual([])
  // The table must show real differences between the rule sets, or it proves nothing.
  const verdicts = new Set(
    results.flatMap((r) => r.rows.map((row) => `${row.bash.verdict}/${row.bash.asks.length > 0}`)),
  )
  expect(verdicts.size).toBeGreaterThanOrEqual(3)
}, 900_000)

/** The stricter rows under `rules`, each judged by `stricter`; the rows it does not hold for. */
async function stricterFailures(name: string, rules: Record<string, string>, stricter: (row: DiffRow) => boolean) {
  const { rows } = await runRuleSet(name, rules, STRICTER)
  const marks = (row: DiffRow) => (stricter(row) ? "stricter" : "NO")
  console.log(`\n${renderTable(`${name}: ${JSON.stringify(rules)}`, rows, marks)}\n`)
  return rows.filter((row) => marks(row) === "NO").map((row) => `${row.command}\n  ${JSON.stringify(row)}`)
}

test("stricter rows, everything asked: monitor_start asks what the bash tool asks, plus each hidden command", async () => {
  const patterns = (o: DiffRow["bash"], kind: string) =>
    o.asks.filter((a) => a.permission === kind).flatMap((a) => a.patterns)
  const failures = await stricterFailures("everything asked", EVERYTHING_ASKED, (row) => {
    const hidden = hiddenIn(row) ?? []
    const kinds = [...new Set([...row.bash.asks, ...row.monitor.asks].map((a) => a.permission))]
    return (
      // Never less strict (monitor_start refuses a program missing from PATH, e.g. doas, before running it).
      strictness(row.monitor) >= strictness(row.bash) &&
      // The same kinds with the same "always" offers: a hidden command is never an "always" entry.
      askSignature(row.bash) === askSignature(row.monitor) &&
      kinds.every((kind) => patterns(row.bash, kind).every((p) => patterns(row.monitor, kind).includes(p))) &&
      // The extra question: what the bash tool does not ask, monitor_start does.
      hidden.every((p) => !patterns(row.bash, "bash").includes(p) && patterns(row.monitor, "bash").includes(p))
    )
  })
  expect(failures).toEqual([])
}, 300_000)

test("stricter rows, hidden programs denied: monitor_start refuses what the bash tool lets through", async () => {
  const failures = await stricterFailures(
    "hidden programs denied",
    HIDDEN_DENIED,
    (row) => row.bash.verdict === "ran" && row.bash.asks.length === 0 && row.monitor.verdict === "denied",
  )
  expect(failures).toEqual([])
}, 300_000)
