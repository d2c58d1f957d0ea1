// test-runner: about 91 s (scripts/test.ts starts the longest first)
/**
 * Shell parity: a command that works with opencode's bash tool works with
 * monitor_start. For a corpus of commands using bash features and environment, the scripted model
 * gives the same string to `bash` and to `monitor_start` in one step; the output lines and exit
 * status seen through the monitor (its envelopes) must equal what the bash tool returned — with
 * SHELL set to bash, unset, set to a shell opencode refuses (fish), and with opencode.json's `shell`
 * setting (there the rows that show the shell chosen and its exit status). monitor_start's
 * description must name that shell. One server per SHELL (the opencode.json setting is a project of
 * the fish server), the four settings in parallel; up to 16 commands share one step (each monitor's
 * envelopes are told apart by its id); under a minute on 2 busy cores.
 */
import { afterAll, expect, test } from "bun:test"
import { allRuns, COMMANDS_PER_STEP, differentialAgent, runDifferential } from "../src/differential.ts"
import { type Envelope, type MonitorQA, sharedServers } from "../src/monitor-qa.ts"
import { waitForEnvelope } from "../src/scenario.ts"

const CORPUS = [
  'echo "shell=$0 SHELL=$SHELL"',
  "[[ 1 == 1 ]] && echo BASHISM_OK",
  "source /dev/null && echo SOURCE_OK",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
  'arr=(a b c); echo "${arr[1]} ${#arr[@]}"',
  "echo {1..5} x{a,b}",
  'set -o pipefail; false | true; echo "status=$?"',
  "[[ $RANDOM =~ ^[0-9]+$ ]] && echo RANDOM_IS_A_NUMBER",
  'cat <<< "here string"',
  "shopt -s extglob && echo EXTGLOB_OK",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
  'declare -A m=([k]=v); echo "${m[k]}"',
  "echo $((2**10))",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
  'echo "${BASH_VERSION:+has BASH_VERSION}"',
  'f() { local x=inner; echo "$x"; }; f',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
  's=hello; echo "${s^^} ${s:1:3}"',
  "diff <(echo a) <(echo a) && echo PROCSUB_OK",
  "type -t source shopt",
  "echo before; exit 3",
  "echo to-stderr >&2; echo to-stdout",
]

// Where the shell is chosen some other way, the rows that show which shell ran and how it exits:
// the rest of the corpus tests bash's features, the same in every setting.
const CHOICE = [CORPUS[0], CORPUS[1], "echo before; exit 3"] as string[]

type Setting = { env: Record<string, string>; config?: Record<string, string>; shell: string; corpus: string[] }
// `shell` is the path both tools must run: `$0` shows it, and monitor_start's description names it.
const BASH = Bun.which("bash") ?? "bash"
const SHELLS: Record<string, Setting> = {
  "SHELL=/bin/bash": { env: { SHELL: "/bin/bash" }, shell: "/bin/bash", corpus: CORPUS },
  "SHELL unset": { env: {}, shell: BASH, corpus: CHOICE },
  "SHELL=/usr/bin/fish (refused)": { env: { SHELL: "/usr/bin/fish" }, shell: BASH, corpus: CHOICE },
  'opencode.json "shell": "/bin/bash", SHELL=/usr/bin/fish': {
    env: { SHELL: "/usr/bin/fish" },
    config: { shell: "/bin/bash" },
    shell: "/bin/bash",
    corpus: CHOICE,
  },
}

type Seen = { lines: string[]; exit: number | null }
const shared = sharedServers()
afterAll(() => shared.stopAll())

function bashToolSeen(output: string, exit: unknown): Seen {
  const lines = output === "(no output)" ? [] : output.replace(/\n$/, "").split("\n")
  return { lines: lines.sort(), exit: typeof exit === "number" ? exit : null }
}

function monitorSeen(text: string, status: string): Seen {
  const lines = [...text.matchAll(/^\[(?:stdout|stderr) seq=\d+\] (.*)$/gm)].map((m) => m[1] ?? "")
  const code = status.match(/code=(\d+)/)?.[1]
  return { lines: lines.sort(), exit: code === undefined ? null : Number(code) }
}

/** SHELL is the server's environment: a server per SHELL, each setting of it a project with its own opencode.json. */
function settingProject(setting: Setting): Promise<MonitorQA> {
  const options = {
    env: setting.env,
    script: differentialAgent(),
    pluginOptions: { max_monitors_per_session: COMMANDS_PER_STEP },
  }
  return shared.project(JSON.stringify(setting.env), options, setting.config ?? {})
}

async function runShell(name: string, setting: Setting) {
  const qa = await settingProject(setting)
  const rows: { command: string; bash: Seen; monitor: Seen }[] = []
  for (const row of await runDifferential(qa, setting.corpus)) {
    const { command, monitor } = row
    const bash = bashToolSeen(row.bash.output, row.bash.exit)
    if (monitor.verdict !== "ran") {
      // monitor_start refused to start it: a difference the table shows as such.
      rows.push({ command, bash, monitor: { lines: [`monitor_start failed: ${monitor.output}`], exit: null } })
      continue
    }
    const own = (e: Envelope) => e.monitorId === monitor.monitorId
    const exited = await waitForEnvelope(
      qa,
      row.sessionID,
      (e) => own(e) && e.status.startsWith("exited"),
      `the exit of ${command}`,
    )
    const all = (await qa.envelopes(row.sessionID))
      .filter(own)
      .map((e) => e.text)
      .join("\n")
    rows.push({ command, bash, monitor: monitorSeen(all, exited.status) })
  }
  const tool = qa.model.scripted()[0]?.request.tools?.find((t) => t.function.name === "monitor_start")
  return { name, rows, description: tool?.function.description ?? "", setting }
}

test("the bash tool and monitor_start print the same lines and exit status, whatever SHELL is", async () => {
  const results = await allRuns(Object.entries(SHELLS).map(([name, setting]) => runShell(name, setting)))
  const failures: string[] = []
  for (const { name, rows, description, setting } of results) {
    if (!description.includes(`runs in ${setting.shell} (\`${setting.shell} -c <command>\`)`)) {
      failures.push(`${name}: monitor_start's description does not name ${setting.shell}: ${description}`)
    }
    const dollarZero = rows[0]?.bash.lines[0] ?? ""
    if (!dollarZero.startsWith(`shell=${setting.shell} `)) failures.push(`${name}: the bash tool ran ${dollarZero}`)
    console.log(`\n### ${name}\n\n| command | bash tool | monitor_start | same |\n|---|---|---|---|`)
    for (const row of rows) {
      const same = JSON.stringify(row.bash) === JSON.stringify(row.monitor)
      const cell = (s: Seen) => `${s.lines.join(" / ").replaceAll("|", "\\|")} (exit ${s.exit})`
      console.log(
        `| \`${row.command.replaceAll("|", "\\|")}\` | ${cell(row.bash)} | ${cell(row.monitor)} | ${same ? "yes" : "NO"} |`,
      )
      if (!same)
        failures.push(
          `${name}: ${row.command}: bash ${JSON.stringify(row.bash)} monitor ${JSON.stringify(row.monitor)}`,
        )
    }
  }
  expect(failures).toEqual([])
}, 600_000)
