/**
 * The packaged plugin as users get it: `npm pack` of packages/opencode-monitor (its prepack builds
 * dist/), published to a throwaway verdaccio on 127.0.0.1 with no uplinks (nothing reaches the
 * internet), and an npm config that points an isolated opencode at that registry.
 */
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { freePort } from "./free-port.ts"
import { findUp } from "./isolated-env.ts"
import { type GroupProcess, killGroup, spawnGroup } from "./process-group.ts"
import { sleep, waitFor } from "./wait.ts"

export const PLUGIN_PACKAGE_DIR = resolve(import.meta.dir, "../../opencode-monitor")

/** A clean environment for npm: no npm_config_* inherited from an outer `npm test`. */
function npmEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin", HOME: home, ...extra }
}

function run(cmd: string[], cwd: string, env: Record<string, string>): string {
  const result = Bun.spawnSync({ cmd, cwd, env, stdout: "pipe", stderr: "pipe" })
  if (result.exitCode !== 0) {
    throw new Error(`${cmd.join(" ")} failed (exit ${result.exitCode}):\n${result.stdout}\n${result.stderr}`)
  }
  return result.stdout.toString()
}

const PACK_LOCK = join(tmpdir(), `opencode-monitor-pack-${Bun.hash(PLUGIN_PACKAGE_DIR).toString(16)}.lock`)
const PACK_LOCK_STALE_MS = 120_000

/**
 * One `npm pack` of the package at a time across processes: its prepack rebuilds dist/ in place,
 * and live test files run in parallel. A lock left by a killed process is taken over once stale.
 */
async function withPackLock<T>(body: () => T): Promise<T> {
  const deadline = Date.now() + 3 * PACK_LOCK_STALE_MS
  for (;;) {
    try {
      closeSync(openSync(PACK_LOCK, "wx"))
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
      const age = Date.now() - (statSync(PACK_LOCK, { throwIfNoEntry: false })?.mtimeMs ?? Date.now())
      if (age > PACK_LOCK_STALE_MS) rmSync(PACK_LOCK, { force: true })
      if (Date.now() > deadline) throw new Error(`another npm pack of opencode-monitor held ${PACK_LOCK} too long`)
      await sleep(200)
    }
  }
  try {
    return body()
  } finally {
    rmSync(PACK_LOCK, { force: true })
  }
}

/** `npm pack` of the plugin package into `destination`, exactly as a publish would build it; returns the .tgz path. */
export function packPlugin(destination: string): Promise<string> {
  mkdirSync(destination, { recursive: true })
  return withPackLock(() => {
    run(["npm", "pack", "--pack-destination", destination], PLUGIN_PACKAGE_DIR, npmEnv(destination))
    const tarball = readdirSync(destination).find((name) => /^opencode-monitor-.*\.tgz$/.test(name))
    if (!tarball) throw new Error(`npm pack wrote no opencode-monitor-*.tgz into ${destination}`)
    return join(destination, tarball)
  })
}

export interface LocalRegistry {
  /** Base URL with a trailing slash, as npm writes registry URLs. */
  url: string
  /** Lines verdaccio printed (its access log shows every package request). */
  logs: GroupProcess["lines"]
  /** Publish a tarball with the npm CLI, as a maintainer would. */
  publish(tarball: string): void
  /** `.npmrc` text that points npm (and opencode's plugin installer) at this registry only. */
  npmrc(): string
  stop(): Promise<void>
}

function verdaccioBin(): string {
  const found = findUp(import.meta.dir, "node_modules/verdaccio/bin/verdaccio")
  if (!found) throw new Error("verdaccio is not installed: run npm install at the repo root (live-qa devDependency)")
  return found
}

export async function startLocalRegistry(): Promise<LocalRegistry> {
  const root = mkdtempSync(join(tmpdir(), "oc-registry-"))
  const port = await freePort()
  const url = `http://127.0.0.1:${port}/`
  const configFile = join(root, "config.yaml")
  // No uplinks: a package that was not published here is a 404, never fetched from the internet.
  writeFileSync(
    configFile,
    [
      `storage: ${join(root, "storage")}`,
      "auth:",
      "  htpasswd:",
      `    file: ${join(root, "htpasswd")}`,
      "uplinks: {}",
      "packages:",
      "  '**':",
      "    access: $all",
      "    publish: $authenticated",
      "log: { type: stdout, format: pretty, level: http }",
      "",
    ].join("\n"),
  )
  const child = spawnGroup(
    ["node", verdaccioBin(), "--config", configFile, "--listen", `127.0.0.1:${port}`],
    root,
    npmEnv(root),
  )
  const stop = async () => {
    await killGroup(child, 2000)
    rmSync(root, { recursive: true, force: true })
  }
  try {
    await waitFor(
      () =>
        fetch(`${url}-/ping`).then(
          (r) => r.ok || undefined,
          () => undefined,
        ),
      30_000,
      100,
      `verdaccio listening on ${url}`,
    )
    // A user for publishing: verdaccio's htpasswd plugin creates it on the first adduser call.
    const response = await fetch(`${url}-/user/org.couchdb.user:live-qa`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "live-qa", password: "live-qa-password" }),
    })
    const body = (await response.json()) as { token?: string }
    if (!response.ok || !body.token)
      throw new Error(`verdaccio adduser answered ${response.status}: ${JSON.stringify(body)}`)
    const token = body.token
    const host = url.replace(/^http:/, "")
    const npmrc = () => `registry=${url}\n${host}:_authToken=${token}\n`
    return {
      url,
      logs: child.lines,
      npmrc,
      publish(tarball) {
        const userconfig = join(root, "publish.npmrc")
        writeFileSync(userconfig, npmrc())
        run(["npm", "publish", tarball, "--registry", url, "--userconfig", userconfig], root, npmEnv(root))
      },
      stop,
    }
  } catch (error) {
    await stop()
    throw new Error(`local registry did not start: ${error}\n${child.lines.map((l) => l.text).join("\n")}`)
  }
}
