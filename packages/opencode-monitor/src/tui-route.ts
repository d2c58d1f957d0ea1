import type { Hooks } from "@opencode-ai/plugin"
import { readFileSync, statSync } from "node:fs"
import { homedir } from "node:os"
import { dirname, join, resolve } from "node:path"
import type { SessionApi } from "./delivery/session-api"
import { sessionWentIdle } from "./hooks"
import { attempt } from "./errors"

// opencode 1.18 installs an `opencode-monitor@file:<tgz>` TUI plugin but silently never loads it: we tell the person.
const FILE_TUI_SPEC = "opencode-monitor@file:"

const MAX_CONFIG_BYTES = 1_000_000

/** The tui.json files opencode 1.18 reads for a project in `directory` (up to `worktree`). */
export function tuiConfigFiles(directory: string, worktree: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const dirs = [join(env.XDG_CONFIG_HOME || join(homedir(), ".config"), "opencode")]
  if (env.OPENCODE_CONFIG_DIR) dirs.push(env.OPENCODE_CONFIG_DIR)
  const stop = resolve(worktree)
  for (let dir = resolve(directory); ; dir = dirname(dir)) {
    dirs.push(dir, join(dir, ".opencode"))
    if (dir === stop || dirname(dir) === dir) break
  }
  const files = dirs.flatMap((dir) => [join(dir, "tui.json"), join(dir, "tui.jsonc")])
  if (env.OPENCODE_TUI_CONFIG) files.push(env.OPENCODE_TUI_CONFIG)
  return [...new Set(files)]
}

/** The files of `candidates` that list this package as a `file:` TUI plugin (unreadable or huge ones are skipped). */
export function filesWithFileTuiSpec(candidates: readonly string[]): string[] {
  return candidates.filter((file) => {
    const stat = attempt(() => statSync(file))
    if (!stat?.isFile() || stat.size > MAX_CONFIG_BYTES) return false
    return attempt(() => readFileSync(file, "utf8"))?.includes(`"${FILE_TUI_SPEC}`) === true
  })
}

type Say = Pick<SessionApi, "log" | "toast">

/** When tui.json names the `file:` route: a log warning at load, a toast at the first idle (the TUI listens then). */
export function withFileTuiSpecNotice(hooks: Hooks, place: { directory: string; worktree?: string }, say: Say): Hooks {
  const files = filesWithFileTuiSpec(tuiConfigFiles(place.directory, place.worktree || place.directory))
  if (files.length === 0) return hooks
  const message =
    `opencode-monitor: ${files.join(", ")} lists "${FILE_TUI_SPEC}…" as a TUI plugin, which opencode 1.18 installs ` +
    "but cannot load, so the sidebar shows no monitors. Unpack the tarball (tar xzf opencode-monitor-<version>.tgz) " +
    'and list its entry by path instead: "plugin": ["/absolute/path/package/src/tui/index.ts"].'
  say.log("warn", message, { files })
  let shown = false
  const event = hooks.event
  return {
    ...hooks,
    async event(input) {
      if (!shown && sessionWentIdle(input.event)) {
        shown = true
        say.toast("warning", "opencode-monitor TUI part not loaded", message)
      }
      await event?.(input)
    },
  }
}
