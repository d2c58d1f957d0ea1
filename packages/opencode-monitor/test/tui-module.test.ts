import { describe, expect, test } from "bun:test"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const TUI_DIR = join(import.meta.dir, "../src/tui")
const PACKAGE = JSON.parse(readFileSync(join(import.meta.dir, "../package.json"), "utf8"))

function importsOf(source: string): string[] {
  return [...source.matchAll(/^\s*import\s[^"']*["']([^"']+)["']/gm)].map((m) => m[1] as string)
}

describe("the TUI part", () => {
  test("is the package's ./tui export, a .tsx module for @opentui/solid", () => {
    expect(PACKAGE.exports["./tui"]).toBe("./src/tui/index.tsx")
    const source = readFileSync(join(TUI_DIR, "index.tsx"), "utf8")
    expect(source.startsWith("/** @jsxImportSource @opentui/solid */")).toBe(true)
    // Target-exclusive: a TUI module never also exports a server.
    expect(source).toMatch(/const plugin: TuiPluginModule & \{ id: string \} = \{ id: ID, tui \}/)
    expect(source).not.toMatch(/\bserver\s*:/)
  })

  test("imports only src/state/ and the leaf codec of the server part, plus what the opencode TUI provides", () => {
    const allowedPackages = new Set(["solid-js", "@opencode-ai/plugin/tui", "node:fs", "node:path"])
    for (const name of readdirSync(TUI_DIR)) {
      for (const specifier of importsOf(readFileSync(join(TUI_DIR, name), "utf8"))) {
        const ok =
          specifier.startsWith("./") ||
          specifier.startsWith("../state/") ||
          specifier === "../codec" ||
          allowedPackages.has(specifier)
        expect(ok ? specifier : `${name} imports ${specifier}`).toBe(specifier)
      }
    }
  })

  test("the .tsx module transpiles (tsc does not check .tsx in this repo)", () => {
    const transpiler = new Bun.Transpiler({ loader: "tsx" })
    const code = transpiler.transformSync(readFileSync(join(TUI_DIR, "index.tsx"), "utf8"))
    expect(code).toContain("sidebar_content")
    expect(code).toContain("opencode-monitor.monitors")
  })
})
