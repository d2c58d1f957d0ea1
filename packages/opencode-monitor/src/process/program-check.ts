import { accessSync, constants } from "node:fs"
import { isAbsolute, resolve } from "node:path"
import { isShellBuiltin } from "./shell"

/**
 * Says why `program` (the program word of `command`'s first simple command) cannot run in
 * `shell`, or undefined when it can or when it is too dynamic to tell (quoting, expansions, a
 * command that sets PATH itself: its shell looks the name up on that PATH, not on `path`).
 * The shell itself always starts, so without this a typo would only show up as exit code 127 later.
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
