import { accessSync, constants } from "node:fs"
import { isAbsolute, resolve } from "node:path"

// Words `sh` runs itself; there is no file to look for.
const SHELL_WORDS = new Set(
  "! { ( . : [ alias bg break case cd command continue eval exec exit export false fg for getopts hash if jobs kill printf pwd read readonly return set shift source test times trap true type ulimit umask unalias unset until wait while echo".split(
    " ",
  ),
)

/**
 * Says why the first program of a command cannot run, or undefined when it can (or when the
 * command is too dynamic to tell: quoting, expansions, assignments). `sh -c` itself always
 * starts, so without this a typo would only show up as exit code 127 later.
 */
export function findMissingProgram(command: string, cwd: string, path: string | undefined): string | undefined {
  const word = command.trim().split(/[\s;&|<>()]/, 1)[0] ?? ""
  if (word === "" || SHELL_WORDS.has(word) || !/^[\w.+/-]+$/.test(word)) return undefined
  if (word.includes("/")) {
    const file = isAbsolute(word) ? word : resolve(cwd, word)
    try {
      accessSync(file, constants.X_OK)
      return undefined
    } catch {
      return `${word} does not exist or is not executable (looked in ${cwd})`
    }
  }
  if (Bun.which(word, { PATH: path ?? "", cwd })) return undefined
  return `${word}: command not found on PATH`
}
