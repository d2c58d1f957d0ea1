import { describe, expect, test } from "bun:test"
import { isShellBuiltin, resolveShell, shellInvocation } from "../src/process/shell"

const files = new Set(["/bin/bash", "/usr/bin/zsh", "/bin/dash", "/usr/bin/fish"])
const deps = (env: NodeJS.ProcessEnv, platform: NodeJS.Platform = "linux", onPath = ["bash", "zsh"]) => ({
  env,
  platform,
  isFile: (path: string) => files.has(path),
  which: (name: string) => (onPath.includes(name) ? `/usr/bin/${name}` : null),
})

describe("which shell the bash tool would use", () => {
  test("the user's $SHELL when it exists", () => {
    expect(resolveShell(undefined, deps({ SHELL: "/usr/bin/zsh" }))).toBe("/usr/bin/zsh")
    expect(resolveShell(undefined, deps({ SHELL: "/bin/dash" }))).toBe("/bin/dash")
  })

  test("a refused shell (fish, nu) falls back to bash from PATH", () => {
    expect(resolveShell(undefined, deps({ SHELL: "/usr/bin/fish" }))).toBe("/usr/bin/bash")
    expect(resolveShell(undefined, deps({ SHELL: "/opt/nu/bin/nu" }))).toBe("/usr/bin/bash")
  })

  test("unset or missing $SHELL falls back to bash, zsh on macOS, then /bin/sh", () => {
    expect(resolveShell(undefined, deps({}))).toBe("/usr/bin/bash")
    expect(resolveShell(undefined, deps({ SHELL: "/nowhere/bash" }))).toBe("/usr/bin/bash")
    expect(resolveShell(undefined, deps({}, "darwin"))).toBe("/bin/zsh")
    expect(resolveShell(undefined, deps({}, "linux", []))).toBe("/bin/sh")
  })

  test("on macOS the same $SHELL rules hold, and every fallback is /bin/zsh, even with bash on PATH", () => {
    const mac = (env: NodeJS.ProcessEnv) => deps(env, "darwin")
    expect(resolveShell(undefined, mac({ SHELL: "/usr/bin/zsh" }))).toBe("/usr/bin/zsh")
    expect(resolveShell(undefined, mac({ SHELL: "/bin/bash" }))).toBe("/bin/bash")
    expect(resolveShell(undefined, mac({ SHELL: "/usr/bin/fish" }))).toBe("/bin/zsh")
    expect(resolveShell(undefined, mac({ SHELL: "/nowhere/bash" }))).toBe("/bin/zsh")
    expect(resolveShell(undefined, mac({}))).toBe("/bin/zsh")
    expect(resolveShell("bash", mac({ SHELL: "/usr/bin/zsh" }))).toBe("/usr/bin/bash")
    expect(resolveShell("nu", mac({ SHELL: "/usr/bin/fish" }))).toBe("/bin/zsh")
  })

  test("opencode.json's shell setting wins over $SHELL; a bare name is looked up on PATH", () => {
    expect(resolveShell("zsh", deps({ SHELL: "/bin/bash" }))).toBe("/usr/bin/zsh")
    expect(resolveShell("fish", deps({ SHELL: "/usr/bin/zsh" }))).toBe("/usr/bin/bash")
  })

  test("invoked as `<shell> -c <command>`", () => {
    expect(shellInvocation("/usr/bin/bash", "echo hi")).toEqual({ file: "/usr/bin/bash", args: ["-c", "echo hi"] })
  })

  test("builtins follow the shell: source is one in bash, not in dash", () => {
    expect(isShellBuiltin("/usr/bin/bash", "source")).toBe(true)
    expect(isShellBuiltin("/usr/bin/bash", "shopt")).toBe(true)
    expect(isShellBuiltin("/bin/dash", "source")).toBe(false)
    expect(isShellBuiltin("/bin/sh", "shopt")).toBe(true)
  })
})
