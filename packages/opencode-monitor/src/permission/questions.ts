import { statSync } from "node:fs"
import { homedir } from "node:os"
import { dirname, isAbsolute, join, relative, resolve } from "node:path"
import { programWord, unquote } from "../process/program-word"
import { arityPrefix } from "./arity"
import { parseSimpleCommands, type SimpleCommand } from "./bash-parser"

/** What to ask opencode before running a command, exactly as its bash tool would ask (plus the stricter extras). */
export type PermissionQuestions = {
  /** Directories outside the project that path arguments point into (`external_directory`). */
  externalDirectories: string[]
  /** One `bash` pattern per simple command. */
  patterns: string[]
  /** The "always" offer: each simple command's arity prefix + ` *`, as the bash tool offers it. */
  always: string[]
  /** The program of every simple command, hidden ones included: the allowed_commands fallback judges these. */
  programs: string[]
}

export type Place = { directory: string; worktree: string }

// Commands whose path arguments the bash tool checks against the project (1.18.33).
const DIRECTORY_COMMANDS = new Set(["cd", "chdir", "popd", "pushd"])
const PATH_COMMANDS = new Set([...DIRECTORY_COMMANDS, "rm", "cp", "mv", "mkdir", "touch", "chmod", "chown", "cat"])
const SHELLS = new Set(["sh", "bash", "zsh", "dash", "ksh"])
const FIND_EXEC = new Set(["-exec", "-execdir", "-ok", "-okdir"])
// Programs that run the rest of their words: value-taking options, plain words before the command (`timeout 5 cmd`).
const RUNNERS: Record<string, { valueOptions: string[]; before?: number }> = {
  xargs: { valueOptions: ["-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s"] },
  sudo: { valueOptions: ["-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U"] },
  doas: { valueOptions: ["-u", "-C"] },
  nice: { valueOptions: ["-n"] },
  ionice: { valueOptions: ["-c", "-n", "-p"] },
  setsid: { valueOptions: [] },
  stdbuf: { valueOptions: ["-i", "-o", "-e"] },
  timeout: { valueOptions: ["-s", "-k"], before: 1 },
}
// How deep `sh -c "eval 'xargs …'"`-style nesting is followed.
const MAX_NESTING = 4

/**
 * The bash tool's own questions unchanged, then each command hidden from it (`hiddenCommand`) as a further `bash`
 * pattern, never an "always" entry, so a deny rule for it still applies.
 */
export async function permissionQuestions(
  commands: readonly SimpleCommand[],
  place: Place,
  isDirectory: (path: string) => boolean = (path) => statSync(path, { throwIfNoEntry: false })?.isDirectory() === true,
): Promise<PermissionQuestions> {
  const dirs = new Set<string>()
  const patterns = new Set<string>()
  const always = new Set<string>()
  const programs: string[] = []
  // `depth` 0: a command the bash tool sees itself; deeper: one hidden in another, asked as a pattern of its own.
  const add = async (simple: SimpleCommand, depth: number): Promise<void> => {
    const name = simple.words[0]
    if (name !== undefined && PATH_COMMANDS.has(name)) {
      for (const dir of outsideDirectories(simple, place, isDirectory)) dirs.add(dir)
    }
    if (name !== undefined && (depth > 0 || !DIRECTORY_COMMANDS.has(name))) {
      patterns.add(simple.text)
      if (depth === 0) always.add(`${arityPrefix(simple.words).join(" ")} *`)
    }
    const program = programWord(simple.argv)
    if (program !== undefined) programs.push(program)
    const inner = hiddenCommand(simple.argv)
    if (inner === undefined || depth >= MAX_NESTING) return
    for (const nested of await parseSimpleCommands(inner)) await add(nested, depth + 1)
  }
  for (const simple of commands) await add(simple, 0)
  return { externalDirectories: [...dirs], patterns: [...patterns], always: [...always], programs }
}

/** The command string a wrapper runs, when its words (`argv`) say it literally; undefined otherwise. */
export function hiddenCommand(words: readonly string[]): string | undefined {
  const plain = words.map(unquote)
  const program = programWord(words)
  const at = program === undefined ? -1 : plain.indexOf(program)
  if (at > 0) return words.slice(at).join(" ")
  const name = plain[0] ?? ""
  if (name === "eval" && words.length > 1) return plain.slice(1).join(" ")
  if (SHELLS.has(name.slice(name.lastIndexOf("/") + 1))) {
    const flag = plain.findIndex((word, i) => i > 0 && /^-[a-zA-Z]*c[a-zA-Z]*$/.test(word))
    return flag > 0 ? plain[flag + 1] : undefined
  }
  const runner = RUNNERS[name]
  if (runner) {
    let i = 1
    while (i < plain.length && (plain[i] ?? "").startsWith("-"))
      i += runner.valueOptions.includes(plain[i] ?? "") ? 2 : 1
    i += runner.before ?? 0
    return i < words.length ? words.slice(i).join(" ") : undefined
  }
  if (name === "find") {
    const start = plain.findIndex((word) => FIND_EXEC.has(word))
    if (start < 0) return undefined
    const end = plain.findIndex((word, i) => i > start && (word === ";" || word === "\\;" || word === "+"))
    return words.slice(start + 1, end < 0 ? undefined : end).join(" ") || undefined
  }
  return undefined
}

/** Directories outside the project that a path command's arguments point into, as the bash tool resolves them. */
function outsideDirectories(simple: SimpleCommand, place: Place, isDirectory: (path: string) => boolean): string[] {
  const [name, ...args] = simple.words
  return args.flatMap((arg) => {
    if (arg.startsWith("-") || (name === "chmod" && arg.startsWith("+"))) return []
    const path = argumentPath(arg, place.directory)
    if (path === undefined || insideProject(path, place)) return []
    return isDirectory(path) ? path : dirname(path)
  })
}

/** An argument as a path: quotes removed, `~` expanded, cut before a glob; undefined when it expands at run time. */
function argumentPath(arg: string, cwd: string): string | undefined {
  let text = unquote(arg)
  if (text === "~") text = homedir()
  else if (text.startsWith("~/")) text = join(homedir(), text.slice(2))
  const glob = /[?*[]/.exec(text)
  if (glob) text = text.slice(0, glob.index)
  const unresolved = text === "" || text.startsWith("(") || text.startsWith("@(") || /[$`]/.test(text)
  return unresolved ? undefined : resolve(cwd, text)
}

function insideProject(path: string, place: Place): boolean {
  return contains(place.directory, path) || (place.worktree !== "/" && contains(place.worktree, path))
}

function contains(parent: string, child: string): boolean {
  const rel = relative(parent, child)
  return !rel.startsWith("..") && !isAbsolute(rel)
}
