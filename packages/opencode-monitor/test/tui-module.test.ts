import { describe, expect, test } from "bun:test"
import { readdirSync, readFileSync } from "node:fs"
import { builtinModules } from "node:module"
import { join } from "node:path"

const TUI_DIR = join(import.meta.dir, "../src/tui")
const PACKAGE = JSON.parse(readFileSync(join(import.meta.dir, "../package.json"), "utf8"))

function importsOf(source: string): string[] {
  return [...source.matchAll(/^\s*import\s[^"']*["']([^"']+)["']/gm)].map((m) => m[1] as string)
}

describe("the TUI part", () => {
  test("is the package's ./tui export, a .ts module with no JSX (opencode compiles JSX only outside node_modules)", () => {
    expect(PACKAGE.exports["./tui"]).toBe("./src/tui/index.ts")
    const names = readdirSync(TUI_DIR)
    expect(names.filter((name) => /\.[jt]sx$/.test(name))).toEqual([])
    const source = readFileSync(join(TUI_DIR, "index.ts"), "utf8")
    expect(source).not.toContain("jsxImportSource")
    // Target-exclusive: a TUI module never also exports a server.
    expect(source).toMatch(/const plugin: TuiPluginModule & \{ id: string \} = \{ id: ID, tui \}/)
    expect(source).not.toMatch(/\bserver\s*:/)
  })

  test("imports only src/state/, the leaf codec and errors, src/host-check.ts and the process table of the server part, plus what the opencode TUI provides", () => {
    const allowedPackages = new Set(["solid-js", "@opentui/solid", "@opencode-ai/plugin/tui", "node:fs", "node:path"])
    for (const name of readdirSync(TUI_DIR)) {
      for (const specifier of importsOf(readFileSync(join(TUI_DIR, name), "utf8"))) {
        const ok =
          specifier.startsWith("./") ||
          specifier.startsWith("../state/") ||
          specifier === "../codec" ||
          specifier === "../errors" ||
          specifier === "../host-check" ||
          specifier === "../process/process-table" ||
          allowedPackages.has(specifier)
        expect(ok ? specifier : `${name} imports ${specifier}`).toBe(specifier)
      }
    }
    // The liveness check's process table (both back ends) needs node's builtins and the leaf errors only.
    for (const name of ["process-table.ts", "proc-table.ts", "ps-table.ts"]) {
      for (const specifier of importsOf(readFileSync(join(TUI_DIR, "../process", name), "utf8"))) {
        const ok =
          specifier.startsWith("node:") ||
          ["./process-table", "./proc-table", "./ps-table", "../errors"].includes(specifier)
        expect(ok ? specifier : `process/${name} imports ${specifier}`).toBe(specifier)
      }
    }
  })

  test("everything it loads, src/state/ included, imports only node's builtins and what the opencode TUI provides", async () => {
    // Loaded as source from an install by name, where the package's devDependencies (zod…) are absent:
    // a state module that parsed with zod left the sidebar empty there.
    const built = await Bun.build({ entrypoints: [join(TUI_DIR, "index.ts")], target: "bun", packages: "external" })
    const text = (await built.outputs[0]?.text()) ?? ""
    const imported = [...new Set([...text.matchAll(/from\s*"([^"]+)"/g)].map((m) => m[1] ?? ""))]
    expect(imported).toContain("solid-js")
    const provided = [/^@opentui\//, /^solid-js$/, /^@opencode-ai\/plugin\/tui$/, /^node:/]
    const builtin = (name: string) => builtinModules.includes(name)
    expect(imported.filter((name) => !builtin(name) && !provided.some((p) => p.test(name)))).toEqual([])
  })

  test("src/host-check.ts and src/errors.ts, shared with the TUI part, import nothing", () => {
    expect(importsOf(readFileSync(join(TUI_DIR, "../host-check.ts"), "utf8"))).toEqual([])
    expect(importsOf(readFileSync(join(TUI_DIR, "../errors.ts"), "utf8"))).toEqual([])
  })

  test("index.ts only renders: what it shows is decided in the checked model.ts", () => {
    const source = readFileSync(join(TUI_DIR, "index.ts"), "utf8")
    expect(importsOf(source).filter((s) => s.startsWith("../"))).toEqual(["../host-check"])
    expect(source).toContain('from "./model"')
  })
})
