import { accessSync, constants } from "node:fs"
import { isAbsolute, resolve } from "node:path"
import { isShellBuiltin } from "./shell"

/**
 * Why `program` (of `command`'s first simple command) cannot run in `shell`; undefined when it can or is too
 * dynamic to tell (quoting, expansions, a PATH set by the command). Else a typo would only show as exit 127 later.
 */
export function findMissingProgram(
  program: string | undefined,
  command: string,
  shell: string,
  cwd: string,
  path: string | undefined,
): string | undefined {
  const word = program ?? ""
  if (word === "" || isShellBuiltin(shell, word) || !/^[\w.+/-]+$/.test(word)) return undefined
  if (word.includes("/")) {
    const file = isAbsolute(word) ? word : resolve(cwd, word)
    try {
      accessSync(file, constants.X_OK)
      return undefined
    } catch {
      return `${word} does not exist or is not executable (looked in ${cwd})`
    }
  }
  if (SETS_PATH.test(command) || Bun.which(word, { PATH: path ?? "", cwd })) return undefined
  return `${word}: command not found on PATH`
}

// `PATH=… cmd`, `env PATH=… cmd`, `export PATH=…; cmd`, `PATH+=…`: a PATH assignment anywhere.
const SETS_PATH = /(?:^|[^\w$])PATH\+?=/
