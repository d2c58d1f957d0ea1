/**
 * A throwaway, offline home for one opencode server: temp HOME and XDG dirs,
 * a generated config file, a git-initialised project, and config dirs
 * pre-seeded so opencode's hidden `@opencode-ai/plugin` install is skipped
 * (with no registry that install would hang the first request for minutes).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { basename, dirname, join } from "node:path"

export type JsonObject = { [key: string]: unknown }

export interface IsolatedDirs {
  root: string
  home: string
  config: string
  data: string
  cache: string
  state: string
  project: string
  configFile: string
}

/** Walk up from `start` to the first directory holding `relative`. */
export function findUp(start: string, relative: string): string | undefined {
  let dir = start
  for (;;) {
    if (existsSync(join(dir, relative))) return join(dir, relative)
    const parent = dirname(dir)
    if (parent === dir) return undefined
    dir = parent
  }
}

/** The installed `@opencode-ai/plugin` package dir; its deps resolve from the workspace node_modules. */
export function pluginPackageDir(): string {
  const found = findUp(import.meta.dir, "node_modules/@opencode-ai/plugin/package.json")
  if (!found) throw new Error("@opencode-ai/plugin is not installed; run npm install at the repo root")
  return dirname(found)
}

/**
 * The opencode release the harness runs: `OPENCODE_VERSION` (set by `npm test` for the oldest tested
 * release) or the repo's `opencode-ai` devDependency. Each tested release is a pinned devDependency:
 * the newest as `opencode-ai`, older ones as npm aliases `opencode-ai-<version>`.
 */
export function opencodeVersion(): string {
  if (process.env.OPENCODE_VERSION) return process.env.OPENCODE_VERSION
  const manifest = findUp(import.meta.dir, "node_modules/opencode-ai/package.json")
  if (!manifest) return JSON.parse(readFileSync(join(pluginPackageDir(), "package.json"), "utf8")).version
  return JSON.parse(readFileSync(manifest, "utf8")).version
}

function readVersion(manifest: string): string | undefined {
  try {
    return JSON.parse(readFileSync(manifest, "utf8")).version
  } catch {
    return undefined
  }
}

/** A real executable, not the shell stub `opencode-ai` ships until its postinstall links the binary. */
function isNativeBinary(path: string): boolean {
  try {
    const head = readFileSync(path).subarray(0, 4)
    const magic = head.toString("hex")
    return magic === "7f454c46" || magic === "cffaedfe" || magic === "cefaedfe"
  } catch {
    return false
  }
}

/**
 * The binary of `opencodeVersion()`, found from its pinned package, never from `node_modules/.bin`
 * (two aliases of `opencode-ai` both claim `.bin/opencode`; which one wins is install order). The
 * package's own `bin/opencode.exe` when its postinstall ran, else the platform package it depends on
 * (nested under the alias, or hoisted when its version matches).
 */
export function opencodeBinary(): string {
  if (process.env.OPENCODE_BIN) return process.env.OPENCODE_BIN
  const version = opencodeVersion()
  const modules = findUp(import.meta.dir, "node_modules/opencode-ai")
  if (!modules) throw new Error("opencode binary not found; install the opencode-ai devDependency")
  const root = dirname(modules)
  const packages = [join(root, "opencode-ai"), join(root, `opencode-ai-${version}`)].filter(
    (dir) => readVersion(join(dir, "package.json")) === version,
  )
  const platform = `opencode-${process.platform === "win32" ? "windows" : process.platform}-${process.arch}`
  for (const dir of packages) {
    const candidates = [
      join(dir, "bin", "opencode.exe"),
      join(dir, "node_modules", platform, "bin", "opencode"),
      join(dir, "node_modules", `${platform}-baseline`, "bin", "opencode"),
    ]
    for (const hoisted of [platform, `${platform}-baseline`]) {
      if (readVersion(join(root, hoisted, "package.json")) === version)
        candidates.push(join(root, hoisted, "bin", "opencode"))
    }
    const found = candidates.find(isNativeBinary)
    if (found) return found
  }
  throw new Error(
    `opencode ${version} not found: install the devDependency "opencode-ai-${version}": "npm:opencode-ai@${version}" (or set OPENCODE_BIN)`,
  )
}

export function createIsolatedDirs(prefix = "oc-live-"): IsolatedDirs {
  const root = mkdtempSync(join(tmpdir(), prefix))
  const dirs: IsolatedDirs = {
    root,
    home: join(root, "home"),
    config: join(root, "xdg-config"),
    data: join(root, "xdg-data"),
    cache: join(root, "xdg-cache"),
    state: join(root, "xdg-state"),
    project: join(root, "project"),
    configFile: join(root, "opencode.json"),
  }
  for (const dir of [dirs.home, dirs.config, dirs.data, dirs.cache, dirs.state]) {
    mkdirSync(dir, { recursive: true })
  }
  seedConfigDir(join(dirs.config, "opencode"), opencodeVersion())
  createProjectDir(dirs.project)
  return dirs
}

/** A git-initialised project dir a server can open, its `.opencode` seeded so nothing is installed. */
export function createProjectDir(project: string): void {
  mkdirSync(project, { recursive: true })
  initGitProject(project)
  seedConfigDir(join(project, ".opencode"), opencodeVersion())
}

function initGitProject(project: string): void {
  // A git root stops opencode's config discovery from walking up into stray parent configs.
  const git = (...args: string[]) => {
    const result = Bun.spawnSync({
      cmd: ["git", ...args],
      cwd: project,
      env: { ...gitEnv(), PATH: process.env.PATH ?? "/usr/bin:/bin" },
    })
    if (result.exitCode !== 0) throw new Error(`git ${args.join(" ")} failed: ${result.stderr.toString()}`)
  }
  git("init", "-q")
  // opencode names a project by its first commit: the dir's name keeps two projects of one server apart.
  writeFileSync(join(project, "README.md"), `live QA project ${basename(project)}\n`)
  git("add", "README.md")
  // A first commit gives the project a stable id instead of opencode's "global" fallback.
  git("commit", "-q", "-m", "init")
}

function gitEnv(): Record<string, string> {
  return {
    GIT_AUTHOR_NAME: "live-qa",
    GIT_AUTHOR_EMAIL: "live-qa@example.invalid",
    GIT_COMMITTER_NAME: "live-qa",
    GIT_COMMITTER_EMAIL: "live-qa@example.invalid",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
  }
}

/**
 * opencode skips its install when the dir has the package in node_modules and a
 * package.json + package-lock.json listing it at the server's version.
 */
export function seedConfigDir(dir: string, version: string): void {
  const scope = join(dir, "node_modules", "@opencode-ai")
  mkdirSync(scope, { recursive: true })
  // A symlink, not a copy: the real path keeps resolving zod/effect/sdk from the workspace node_modules.
  const link = join(scope, "plugin")
  if (!existsSync(link)) symlinkSync(pluginPackageDir(), link, "dir")
  const dependencies = { "@opencode-ai/plugin": version }
  writeFileSync(join(dir, "package.json"), `${JSON.stringify({ dependencies }, null, 2)}\n`)
  const lock = {
    name: "opencode-config",
    lockfileVersion: 3,
    requires: true,
    packages: {
      "": { dependencies },
      "node_modules/@opencode-ai/plugin": { version, link: false },
    },
  }
  writeFileSync(join(dir, "package-lock.json"), `${JSON.stringify(lock, null, 2)}\n`)
}

export function removeIsolatedDirs(dirs: IsolatedDirs): void {
  rmSync(dirs.root, { recursive: true, force: true })
}

export function isolatedEnv(dirs: IsolatedDirs, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
    HOME: dirs.home,
    XDG_CONFIG_HOME: dirs.config,
    XDG_DATA_HOME: dirs.data,
    XDG_CACHE_HOME: dirs.cache,
    XDG_STATE_HOME: dirs.state,
    OPENCODE_CONFIG: dirs.configFile,
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPENCODE_DISABLE_SHARE: "1",
    OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
    OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
    ...gitEnv(),
    ...extra,
  }
}

const isPlainObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Recursive merge for config objects; arrays and scalars from `extra` replace. */
export function mergeConfig(base: JsonObject, extra: JsonObject): JsonObject {
  const out: JsonObject = { ...base }
  for (const [key, value] of Object.entries(extra)) {
    const current = out[key]
    out[key] = isPlainObject(current) && isPlainObject(value) ? mergeConfig(current, value) : value
  }
  return out
}
