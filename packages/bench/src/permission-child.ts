/**
 * Child of the permission bench, a fresh process per run so the first call pays for loading the
 * parser. `load`: time to import the plugin and run its server factory, and whether that loaded
 * the parser. `questions`: the permission questions for CALLS commands, each call timed.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const [mode, calls] = process.argv.slice(2)
const COMMANDS = [
  "npm run dev",
  "echo a; rm -rf ./x",
  "git status && git diff --stat | head -20",
  "cd packages/app && FOO=1 npm test -- --watch",
  "cat <<EOF > out.txt\nhello $(date)\nEOF",
  "sh -c 'tail -f logs/*.log | grep --line-buffered ERROR'",
  'for f in src/*.ts; do wc -l "$f"; done',
  "cat ../outside.txt ~/.profile /etc/hostname",
]

if (mode === "load") {
  const t = performance.now()
  const plugin = (await import("../../opencode-monitor/src/index.ts")).default
  const input = { client: {}, directory: tmpdir(), worktree: tmpdir() } as never
  await plugin.server(input, {})
  const loadMs = performance.now() - t
  const { bashParserRequested, loadBashParser } = await import("../../opencode-monitor/src/permission/bash-parser.ts")
  const loadedByPlugin = bashParserRequested()
  const p = performance.now()
  await loadBashParser()
  const parserMs = performance.now() - p
  process.stdout.write(`${JSON.stringify({ loadMs, parserMs, loadedByPlugin })}\n`)
} else {
  const { permissionQuestions } = await import("../../opencode-monitor/src/permission/questions.ts")
  const { parseSimpleCommands } = await import("../../opencode-monitor/src/permission/bash-parser.ts")
  const project = mkdtempSync(join(tmpdir(), "bench-perm-"))
  const times: number[] = []
  for (let i = 0; i < Number(calls); i++) {
    const t = performance.now()
    const commands = await parseSimpleCommands(COMMANDS[i % COMMANDS.length] as string)
    await permissionQuestions(commands, { directory: project, worktree: project })
    times.push(performance.now() - t)
  }
  process.stdout.write(`${JSON.stringify({ times })}\n`)
}
