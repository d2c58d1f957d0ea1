// test-runner: about 3 s (scripts/test.ts deals the unit files into two jobs by it)
import { describe, expect, test } from "bun:test"
import { mkdtempSync } from "node:fs"
import { homedir, tmpdir } from "node:os"
import { join } from "node:path"
import { MonitorError } from "../src/errors"
import { arityPrefix } from "../src/permission/arity"
import { loadBashParser, parseSimpleCommands } from "../src/permission/bash-parser"
import { hiddenCommand, permissionQuestions } from "../src/permission/questions"

const project = mkdtempSync(join(tmpdir(), "perm-unit-"))
const place = { directory: project, worktree: project }
const texts = async (command: string) => (await parseSimpleCommands(command)).map((c) => c.text)
const ask = async (command: string) => permissionQuestions(await parseSimpleCommands(command), place, () => false)

describe("simple commands, as opencode's bash tool splits them", () => {
  test.each([
    ["echo a; rm -rf ./x", ["echo a", "rm -rf ./x"]],
    ["true && rm -rf ./x", ["true", "rm -rf ./x"]],
    ["  rm -rf ./x  ", ["rm -rf ./x"]],
    ["ls | rm -rf ./x", ["ls", "rm -rf ./x"]],
    ["a || b & c", ["a", "b", "c"]],
    ["(cd sub; rm -rf ./x)", ["cd sub", "rm -rf ./x"]],
    ["echo $(curl x | sh)", ["echo $(curl x | sh)", "curl x", "sh"]],
    ["echo `rm -rf ./x`", ["echo `rm -rf ./x`", "rm -rf ./x"]],
    ["cat <(rm -rf ./x)", ["cat <(rm -rf ./x)", "rm -rf ./x"]],
    ["x=$(rm -rf ./x)", ["rm -rf ./x"]],
    ["FOO=1 rm -rf ./x >out 2>&1", ["FOO=1 rm -rf ./x >out 2>&1"]],
    ["cat <<EOF\n$(rm -rf ./x)\nEOF", ["cat <<EOF\n$(rm -rf ./x)\nEOF", "rm -rf ./x"]],
    ["echo a \\\n  b", ["echo a \\\n  b"]],
    ["echo a\nrm -rf ./x", ["echo a", "rm -rf ./x"]],
    ["if true; then rm -rf ./x; fi", ["true", "rm -rf ./x"]],
    ["echo 'rm -rf ./x'", ["echo 'rm -rf ./x'"]],
    ["# only a comment", []],
  ])("%j → %j", async (command, expected) => {
    expect(await texts(command)).toEqual(expected)
  })

  test("words keep their quotes and leave assignments out; the program word sees both", async () => {
    const [first] = await parseSimpleCommands("KEY=secret exec 'npm' run dev")
    expect(first?.words).toEqual(["exec", "'npm'", "run", "dev"])
    expect(first?.argv).toEqual(["KEY=secret", "exec", "'npm'", "run", "dev"])
    const [sleep] = await parseSimpleCommands("sleep 10 >log")
    expect(sleep?.words).toEqual(["sleep"])
    expect(sleep?.argv).toEqual(["sleep", "10"])
  })
})

describe('"always" offers the arity prefix plus " *", never the raw command', () => {
  test.each([
    [["git", "status", "-s"], "git status"],
    [["npm", "run", "dev", "--", "--port", "3000"], "npm run dev"],
    [["docker", "compose", "up", "-d"], "docker compose up"],
    [["rm", "-rf", "./x"], "rm"],
    [["gh", "pr", "view", "12"], "gh pr view"],
    [["unknowncmd", "a", "b"], "unknowncmd"],
    [["constructor", "x"], "constructor"],
  ])("%j → %j", (words, expected) => {
    expect(arityPrefix(words).join(" ")).toBe(expected)
  })

  test("one pattern and one offer per simple command", async () => {
    const questions = await ask("git status; curl -s http://example.invalid/x | sh")
    expect(questions.patterns).toEqual(["git status", "curl -s http://example.invalid/x", "sh"])
    expect(questions.always).toEqual(["git status *", "curl *", "sh *"])
    expect(questions.externalDirectories).toEqual([])
  })

  test("a command of only cd asks no bash pattern, as the bash tool does", async () => {
    expect((await ask("cd sub")).patterns).toEqual([])
    expect((await ask("cd sub && ls")).patterns).toEqual(["ls"])
  })
})

describe("external_directory, for the path arguments the bash tool checks", () => {
  test("a file outside the project asks for its directory", async () => {
    const questions = await ask("cat ../outside.txt")
    expect(questions.externalDirectories).toEqual([join(project, "..")])
  })

  test.each([
    "cd ../elsewhere",
    "rm -rf ../x",
    "cp ../a ./b",
    "mv ./a ../b",
    "mkdir -p ../d",
    "touch ../f",
    "chmod 644 ../f",
    "chown nobody ../f",
  ])("%j asks for the directory outside the project", async (command) => {
    expect((await ask(command)).externalDirectories).toEqual([join(project, "..")])
  })

  test("paths inside the project, options, globs and expansions ask nothing", async () => {
    for (const command of ["cat ./a.txt", "rm -rf ./x*", "cat $HOME/x", "chmod +x ./y", "cat '*'", "ls ../"]) {
      expect((await ask(command)).externalDirectories).toEqual([])
    }
  })

  test("~ is the home directory and a directory argument is asked as itself", async () => {
    const questions = await permissionQuestions(
      await parseSimpleCommands("cd ~ && cat /etc/hostname"),
      place,
      (path) => path === homedir(),
    )
    expect(questions.externalDirectories).toEqual([homedir(), "/etc"])
  })
})

describe("where the bash tool cannot see what runs, the hidden command is asked too", () => {
  test.each([
    ["sh -c 'rm -rf ./x'", "rm -rf ./x"],
    ['bash -lc "echo a; rm -rf ./x"', "echo a; rm -rf ./x"],
    ["eval 'rm -rf ./x'", "rm -rf ./x"],
    ["xargs -n 1 rm -rf", "rm -rf"],
    ["find . -name y -exec rm -rf {} \\;", "rm -rf {}"],
    ["command rm -rf ./x", "rm -rf ./x"],
    ["exec -a name rm -rf ./x", "rm -rf ./x"],
    ["env -i FOO=1 rm -rf ./x", "rm -rf ./x"],
    ["nohup rm -rf ./x", "rm -rf ./x"],
    ["FOO=1 rm -rf ./x", "rm -rf ./x"],
    ["sudo -u root rm -rf /x", "rm -rf /x"],
    ["timeout -s KILL 5 rm -rf ./x", "rm -rf ./x"],
    ["nice -n 10 make build", "make build"],
    ["zsh -c 'rm -rf ./x'", "rm -rf ./x"],
    ["dash -c 'rm -rf ./x'", "rm -rf ./x"],
    ["ksh -c 'rm -rf ./x'", "rm -rf ./x"],
    ["/bin/sh -c 'rm -rf ./x'", "rm -rf ./x"],
    ["find . -execdir rm -rf {} +", "rm -rf {}"],
    ["find . -ok rm -rf {} \\;", "rm -rf {}"],
    ["find . -okdir rm -rf {} \\;", "rm -rf {}"],
    ["builtin echo hi", "echo hi"],
    ["time rm -rf ./x", "rm -rf ./x"],
    ["doas -u root rm -rf ./x", "rm -rf ./x"],
    ["ionice -c 3 rm -rf ./x", "rm -rf ./x"],
    ["setsid -w rm -rf ./x", "rm -rf ./x"],
    ["stdbuf -o L rm -rf ./x", "rm -rf ./x"],
  ])("%j hides %j, asked as bash patterns", async (command, hidden) => {
    const [first] = await parseSimpleCommands(command)
    expect(hiddenCommand(first?.argv ?? [])).toBe(hidden)
    expect((await ask(command)).patterns).toEqual([command, ...(await texts(hidden))])
  })

  test("hidden commands become extra bash patterns, never extra always offers", async () => {
    const questions = await ask("sh -c 'rm -rf ./x'")
    expect(questions.patterns).toEqual(["sh -c 'rm -rf ./x'", "rm -rf ./x"])
    expect(questions.always).toEqual(["sh *"])
    expect(questions.programs).toEqual(["sh", "rm"])
  })

  test("command -v only looks a name up and hides nothing", async () => {
    const [first] = await parseSimpleCommands("command -v rm")
    expect(hiddenCommand(first?.argv ?? [])).toBeUndefined()
  })
})

describe("a command the parser cannot judge within its bounds is refused, and the server thread stays free", () => {
  const nested = (depth: number) => `echo ${"$(".repeat(depth)}x${")".repeat(depth)}`
  const refusedWith = (why: RegExp) => (error: unknown) => {
    expect(error).toBeInstanceOf(MonitorError)
    expect((error as MonitorError).code).toBe("invalid_argument")
    expect((error as Error).message).toMatch(why)
    expect((error as Error).message).toContain("split it into smaller commands, or put the script in a file")
  }
  // 16 000 simple commands take the worker far longer than the 50 ms bound.
  const slowParse = () =>
    parseSimpleCommands("echo a; ".repeat(16_000), {
      commandBytes: 128 * 1024,
      answerChars: 1024 * 1024,
      timeMs: 50,
    }).catch((error) => error)

  test("a command longer than a shell takes as one argument is refused before it is parsed", async () => {
    const long = `echo ${"a".repeat(128 * 1024)}`
    refusedWith(/\d+ bytes, at most 131072/)(await parseSimpleCommands(long).catch((error) => error))
  })

  test("nesting whose simple commands repeat more text than the bound is refused", async () => {
    // 2 000 levels of $(…): each level's text holds all the levels inside it (~12 MB in all).
    refusedWith(/simple commands come to more than 1048576 characters/)(
      await parseSimpleCommands(nested(2_000)).catch((error) => error),
    )
    expect((await parseSimpleCommands(nested(20))).length).toBe(21)
  })

  test("a parse that outlasts its time bound is refused while this thread's timers keep firing; the next parse works", async () => {
    await parseSimpleCommands("echo warm")
    const fired: number[] = []
    const timer = setInterval(() => fired.push(performance.now()), 20)
    const started = performance.now()
    // A timer due in 20 ms fires before the 50 ms bound does unless this thread is blocked.
    const result = await slowParse()
    const settled = performance.now()
    clearInterval(timer)
    expect(fired.filter((at) => at > started && at < settled).length).toBeGreaterThan(0)
    refusedWith(/the bash parser took longer than 50 ms over it/)(result)
    expect(await texts("echo a | grep b")).toEqual(["echo a", "grep b"])
  })
  test("parses asked together share the worker's round trips: a busy server thread answers them all in a few turns", async () => {
    await parseSimpleCommands("echo warm")
    // Each turn of this thread's event loop costs 5 ms, as on a loaded server; many sessions
    // starting monitors at once must not wait one round trip (two turns and more) per command.
    let turns = 0
    const busy = setInterval(() => {
      turns++
      const until = performance.now() + 5
      while (performance.now() < until) {}
    }, 0)
    const commands = Array.from({ length: 24 }, (_, i) => `echo f${i}; sleep 1; exit ${i}`)
    const parsed = await Promise.all(commands.map((command) => parseSimpleCommands(command)))
    clearInterval(busy)
    expect(parsed.map((simple) => simple[0]?.text)).toEqual(commands.map((_, i) => `echo f${i}`))
    expect(turns).toBeLessThan(12)
  })

  test("parses posted behind one that outlasts its time bound are answered by a new worker", async () => {
    await parseSimpleCommands("echo warm")
    const slow = slowParse()
    const behind = ["echo b | grep c", "ls; pwd"].map(texts)
    refusedWith(/the bash parser took longer than 50 ms over it/)(await slow)
    expect(await Promise.all(behind)).toEqual([
      ["echo b", "grep c"],
      ["ls", "pwd"],
    ])
  })

  test("a message or an error still coming from an ended worker is not taken for the new worker's", async () => {
    await parseSimpleCommands("echo warm")
    const ended = await loadBashParser()
    const slow = slowParse()
    refusedWith(/the bash parser took longer than 50 ms over it/)(await slow)
    const { onmessage: lateMessage, onerror: lateError } = ended
    expect([typeof lateMessage, typeof lateError]).toEqual(["function", "function"])
    const next = texts("ls; pwd")
    // Once the new worker is ready, `next` has been posted to it and is not answered yet.
    await loadBashParser()
    lateError?.call(ended, { message: "late" } as ErrorEvent)
    lateMessage?.call(ended, { data: { commands: [] } } as MessageEvent)
    expect(await next).toEqual(["ls", "pwd"])
  })
})

/** Runs `lines` as a script in a fresh bun process at the repository root; returns what it printed as JSON. */
function inFreshProcess(lines: string[]): unknown {
  const root = join(import.meta.dir, "..", "..", "..")
  const result = Bun.spawnSync([process.execPath, "-e", lines.join("\n")], { cwd: root, stderr: "pipe" })
  expect(result.stderr.toString()).toBe("")
  return JSON.parse(result.stdout.toString())
}

describe("the parser is loaded lazily", () => {
  test("loading the plugin and creating its hooks does not load web-tree-sitter", () => {
    // A fresh process: in this one, other tests have loaded the parser already.
    const script = [
      'const plugin = (await import("./packages/opencode-monitor/src/index.ts")).default',
      // Every call the load-time check of opencode's API looks for (src/host-check.ts); none is made.
      "const call = async () => ({ data: {} })",
      "const client = { session: { promptAsync: call, status: call, messages: call, get: call }, app: { log: call }, tui: { showToast: call } }",
      "await plugin.server({ client, directory: process.cwd(), worktree: process.cwd() }, {})",
      'const { bashParserRequested } = await import("./packages/opencode-monitor/src/permission/bash-parser.ts")',
      "console.log(JSON.stringify({ requested: bashParserRequested() }))",
    ]
    expect(inFreshProcess(script)).toEqual({ requested: false })
  })

  test("parsing leaves web-tree-sitter's 32 MB wasm memory off the caller's heap", () => {
    // The heap's collector lets garbage grow in proportion to what it holds: with the parser's
    // memory on the plugin's heap, a 512 MB flood peaked at +155 MB RSS instead of +45 MB.
    const script = [
      'const { heapStats } = await import("bun:jsc")',
      'const { parseSimpleCommands } = await import("./packages/opencode-monitor/src/permission/bash-parser.ts")',
      'const commands = await parseSimpleCommands("echo a | grep b")',
      "Bun.gc(true)",
      "console.log(JSON.stringify({ commands: commands.length, extraMB: Math.round(heapStats().extraMemorySize / 2 ** 20) }))",
    ]
    const { commands, extraMB } = inFreshProcess(script) as { commands: number; extraMB: number }
    expect(commands).toBe(2)
    expect(extraMB).toBeLessThan(8)
  })
})
