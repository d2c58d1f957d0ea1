import { afterEach, describe, expect, test } from "bun:test"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { filesWithFileTuiSpec, tuiConfigFiles, withFileTuiSpecNotice } from "../src/tui-route"

const temps: string[] = []
afterEach(() => {
  for (const dir of temps.splice(0)) rmSync(dir, { recursive: true, force: true })
})

function layout() {
  const root = mkdtempSync(join(tmpdir(), "omo-tui-route-"))
  temps.push(root)
  const config = join(root, "xdg-config")
  const worktree = join(root, "repo")
  const directory = join(worktree, "app")
  mkdirSync(join(config, "opencode"), { recursive: true })
  mkdirSync(join(directory, ".opencode"), { recursive: true })
  return { root, config, worktree, directory, env: { XDG_CONFIG_HOME: config } }
}

function recorder() {
  const said: unknown[][] = []
  return {
    said,
    say: {
      log: (...args: unknown[]) => said.push(["log", ...args]),
      toast: (...args: unknown[]) => said.push(["toast", ...args]),
    },
  }
}

describe("a TUI part listed as opencode-monitor@file: in tui.json", () => {
  test("the files opencode 1.18 reads: the global config dir, then each dir up to the worktree and its .opencode", () => {
    const { config, worktree, directory, env } = layout()
    expect(tuiConfigFiles(directory, worktree, env)).toEqual([
      join(config, "opencode", "tui.json"),
      join(config, "opencode", "tui.jsonc"),
      join(directory, "tui.json"),
      join(directory, "tui.jsonc"),
      join(directory, ".opencode", "tui.json"),
      join(directory, ".opencode", "tui.jsonc"),
      join(worktree, "tui.json"),
      join(worktree, "tui.jsonc"),
      join(worktree, ".opencode", "tui.json"),
      join(worktree, ".opencode", "tui.jsonc"),
    ])
  })

  test("only a file naming the file: route is reported; a by-name or path entry is not", () => {
    const { config, worktree, directory, env } = layout()
    const global = join(config, "opencode", "tui.json")
    const project = join(directory, ".opencode", "tui.jsonc")
    writeFileSync(global, JSON.stringify({ plugin: ["opencode-monitor", "/x/package/src/tui/index.ts"] }))
    writeFileSync(project, '{ // mine\n "plugin": ["opencode-monitor@file:/tmp/opencode-monitor-0.1.0.tgz"] }')
    expect(filesWithFileTuiSpec(tuiConfigFiles(directory, worktree, env))).toEqual([project])
  })

  test("the server log says it at load, the toast once when a turn first ends, and every event passes through", async () => {
    const { directory, worktree } = layout()
    const file = join(directory, "tui.json")
    writeFileSync(file, JSON.stringify({ plugin: ["opencode-monitor@file:/tmp/x.tgz"] }))
    const { said, say } = recorder()
    const seen: string[] = []
    const hooks = withFileTuiSpecNotice(
      { event: async ({ event }) => void seen.push(event.type) },
      { directory, worktree },
      say,
    )
    const message =
      `opencode-monitor: ${file} lists "opencode-monitor@file:…" as a TUI plugin, which opencode 1.18 installs ` +
      "but cannot load, so the sidebar shows no monitors. Unpack the tarball (tar xzf opencode-monitor-<version>.tgz) " +
      'and list its entry by path instead: "plugin": ["/absolute/path/package/src/tui/index.ts"].'
    expect(said).toEqual([["log", "warn", message, { files: [file] }]])
    await hooks.event?.({ event: { type: "server.connected", properties: {} } as never })
    expect(said).toHaveLength(1)
    // A session's first events can come before the TUI listens (`opencode --prompt`): not yet.
    await hooks.event?.({ event: { type: "session.created", properties: {} } as never })
    await hooks.event?.({ event: { type: "session.status", properties: { status: { type: "busy" } } } as never })
    expect(said).toHaveLength(1)
    // Releases say a turn ended with session.status idle, or session.idle, or both: the first one counts.
    await hooks.event?.({ event: { type: "session.status", properties: { status: { type: "idle" } } } as never })
    expect(said).toHaveLength(2)
    await hooks.event?.({ event: { type: "session.idle", properties: {} } as never })
    expect(said.slice(1)).toEqual([["toast", "warning", "opencode-monitor TUI part not loaded", message]])
    expect(seen).toEqual(["server.connected", "session.created", "session.status", "session.status", "session.idle"])
  })

  test("without such an entry the hooks are returned as they are and nothing is said", () => {
    const { directory, worktree } = layout()
    const { said, say } = recorder()
    const hooks = { event: async () => {} }
    expect(withFileTuiSpecNotice(hooks, { directory, worktree }, say)).toBe(hooks)
    expect(said).toEqual([])
  })
})
