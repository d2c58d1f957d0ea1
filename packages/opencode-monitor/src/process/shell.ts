import { statSync } from "node:fs"
import { basename, isAbsolute } from "node:path"

// opencode 1.18.33's bash tool rule (read from the shipped binary): opencode.json's `shell`, else $SHELL, unless
// fish or nu; a name looked up on PATH, a path must be a file; else `bash` on PATH (`/bin/zsh` on macOS), else
// `/bin/sh`. It sets no SHELL: bash fills an unset one from the passwd entry.
const REFUSED = new Set(["fish", "nu"])

export type ShellDeps = {
  env?: NodeJS.ProcessEnv
  platform?: NodeJS.Platform
  isFile?: (path: string) => boolean
  which?: (name: string, path: string | undefined) => string | null
}

/** The shell opencode's bash tool uses for this server: `configured` is opencode.json's `shell`. */
export function resolveShell(configured: string | undefined, deps: ShellDeps = {}): string {
  const env = deps.env ?? process.env
  const isFile = deps.isFile ?? ((path: string) => statSync(path, { throwIfNoEntry: false })?.isFile() === true)
  const which = deps.which ?? ((name: string, path: string | undefined) => Bun.which(name, { PATH: path ?? "" }))
  const candidate = configured || env.SHELL
  if (candidate && !REFUSED.has(shellName(candidate))) {
    const found = isAbsolute(candidate) ? (isFile(candidate) ? candidate : undefined) : which(candidate, env.PATH)
    if (found) return found
  }
  if ((deps.platform ?? process.platform) === "darwin") return "/bin/zsh"
  return which("bash", env.PATH) ?? "/bin/sh"
}

/** `bash`, `zsh`, `sh`…: what a shell path is called. */
function shellName(shell: string): string {
  return basename(shell).toLowerCase()
}

/** How the bash tool invokes its shell: `$0` is the shell's path, the command its `-c` script. */
export function shellInvocation(shell: string, command: string): { file: string; args: string[] } {
  return { file: shell, args: ["-c", command] }
}

// Words the shell runs itself, so there is no file to look for on PATH.
const POSIX_BUILTINS =
  "! { } ( . : [ alias bg break case cd command continue do done elif else esac eval exec exit export false fg fi for getopts hash if in jobs kill printf pwd read readonly return set shift test then times trap true type ulimit umask unalias unset until wait while echo"
const BASH_BUILTINS =
  "[[ ]] bind builtin caller compgen complete compopt coproc declare dirs disown enable fc function help history let local logout mapfile popd pushd readarray select shopt source suspend time typeset"
const ZSH_BUILTINS =
  "[[ ]] autoload bindkey builtin bye chdir declare dirs disable disown echotc emulate enable fc float function functions getln history integer let limit local log logout noglob popd print pushd pushln rehash repeat sched select setopt source stat time typeset unfunction unhash unlimit unsetopt vared whence where which zcompile zformat zle zmodload zparseopts zstyle"
const BUILTINS: Record<string, Set<string>> = {
  bash: new Set(`${POSIX_BUILTINS} ${BASH_BUILTINS}`.split(" ")),
  dash: new Set(`${POSIX_BUILTINS} local`.split(" ")),
  zsh: new Set(`${POSIX_BUILTINS} ${ZSH_BUILTINS}`.split(" ")),
}
// Any other shell (sh, ksh…) gets the union: a missed builtin would wrongly refuse a command.
const ANY_BUILTINS = new Set([...Object.values(BUILTINS).flatMap((set) => [...set])])

/** True when `word` is a builtin or keyword of `shell`, so it runs without a file on PATH. */
export function isShellBuiltin(shell: string, word: string): boolean {
  return (BUILTINS[shellName(shell)] ?? ANY_BUILTINS).has(word)
}
