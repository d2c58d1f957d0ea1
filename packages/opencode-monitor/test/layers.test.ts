import { describe, expect, test } from "bun:test"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"

// The layers of the plugin, from the bottom (CONTRIBUTING.md, "Layout follows the data"). A module
// imports only from its own layer or below; a new file must be given a layer here.
const SRC = join(import.meta.dir, "../src")
const LAYERS: [name: string, paths: string[]][] = [
  ["leaf", ["codec.ts", "config.ts", "errors.ts", "host-check.ts", "log.ts", "scheduler.ts", "tool-definition.ts"]],
  ["process", ["process/", "permission/"]],
  ["pipeline", ["pipeline/"]],
  ["delivery", ["delivery/"]],
  [
    "manager",
    [
      "manager.ts",
      "launch.ts",
      "monitor-run.ts",
      "restart.ts",
      "retention.ts",
      "slots.ts",
      "start-request.ts",
      "state/",
    ],
  ],
  ["tools", ["tools/"]],
  ["entry", ["hooks.ts", "plugin.ts", "notify.ts", "index.ts", "tui-route.ts", "tui/"]],
]

function layerOf(file: string): number {
  const at = LAYERS.findIndex(([, paths]) => paths.some((p) => (p.endsWith("/") ? file.startsWith(p) : file === p)))
  if (at < 0) throw new Error(`${file} has no layer: add it to LAYERS in test/layers.test.ts`)
  return at
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return /\.tsx?$/.test(name) ? [relative(SRC, path)] : []
  })
}

/** Every relative module a file imports or re-exports, types included, resolved to a file under src/. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(SRC, file), "utf8")
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\s[^"';]*?from\s*["']([^"']+)["']/gm),
    ...text.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g),
  ].map((m) => m[1] as string)
  return specifiers
    .filter((s) => s.startsWith("."))
    .map((s) => {
      const base = relative(SRC, resolve(SRC, dirname(file), s)).replace(/\.tsx?$/, "")
      const found = [`${base}.ts`, `${base}.tsx`, `${base}/index.ts`].find((f) => {
        try {
          return statSync(join(SRC, f)).isFile()
        } catch {
          return false
        }
      })
      if (!found) throw new Error(`${file}: cannot resolve ${s}`)
      return found
    })
}

describe("the layers of src/ (process → pipeline → delivery → manager → tools → entry)", () => {
  const files = sourceFiles(SRC)

  test("every file has a layer", () => {
    for (const file of files) expect(() => layerOf(file)).not.toThrow()
  })

  test("a module imports only from its own layer or below", () => {
    const upward: string[] = []
    for (const file of files) {
      for (const target of importsOf(file)) {
        if (layerOf(target) > layerOf(file)) {
          upward.push(`${file} (${LAYERS[layerOf(file)]?.[0]}) imports ${target} (${LAYERS[layerOf(target)]?.[0]})`)
        }
      }
    }
    expect(upward).toEqual([])
  })

  test("pipeline/ never imports delivery/", () => {
    const pipeline = files.filter((f) => f.startsWith("pipeline/"))
    expect(pipeline.length).toBeGreaterThan(0)
    for (const file of pipeline) expect(importsOf(file).filter((t) => t.startsWith("delivery/"))).toEqual([])
  })

  test("the scan sees imports: the entry imports the manager, the router imports the budget", () => {
    expect(importsOf("plugin.ts")).toContain("manager.ts")
    expect(importsOf("delivery/router.ts")).toContain("delivery/budget.ts")
  })
})
