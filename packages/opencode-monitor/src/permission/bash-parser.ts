import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import { fileURLToPath } from "node:url"
import type { Node, Parser } from "web-tree-sitter"

/** One simple command as opencode's bash tool sees it. */
export type SimpleCommand = {
  /** The permission pattern: the command's text (with its redirections), trimmed. */
  text: string
  /** Its name and argument words, quotes kept, assignments and expansions left out. */
  words: string[]
  /** Every word as written, leading `NAME=value` assignments, numbers and expansions included. */
  argv: string[]
}

const require = createRequire(import.meta.url)
// The packed package carries the grammar in <package>/grammar/, and this code runs from dist/ or
// dist/chunks/ there; a checkout (src/permission/) resolves it from node_modules instead.
const PACKED_GRAMMAR = ["../grammar/", "../../grammar/"].map((dir) =>
  fileURLToPath(new URL(`${dir}tree-sitter-bash.wasm`, import.meta.url)),
)
// Child node types opencode 1.18.33's bash tool reads as a command's words.
const WORD_TYPES = new Set(["command_name", "word", "string", "raw_string", "concatenation"])
const REDIRECT_TYPES = new Set(["file_redirect", "heredoc_redirect", "herestring_redirect"])

let parser: Promise<Parser> | undefined

/** Where the tree-sitter-bash grammar is loaded from. */
function grammarPath(): string {
  return PACKED_GRAMMAR.find((path) => existsSync(path)) ?? require.resolve("tree-sitter-bash/tree-sitter-bash.wasm")
}

/**
 * web-tree-sitter's own wasm: from node_modules in a checkout. In the built package web-tree-sitter
 * is bundled and finds the file the build copied beside its chunk by itself.
 */
function parserRuntime(): { locateFile: () => string } | undefined {
  try {
    const runtime = require.resolve("web-tree-sitter/tree-sitter.wasm")
    return { locateFile: () => runtime }
  } catch {
    return undefined
  }
}

/** True once the parser has been asked for: plugin load alone never loads it. */
export function bashParserRequested(): boolean {
  return parser !== undefined
}

/** Loads web-tree-sitter and the bash grammar once, on first use (never at plugin load). */
export function loadBashParser(): Promise<Parser> {
  parser ??= (async () => {
    const { Language, Parser } = await import("web-tree-sitter")
    await Parser.init(parserRuntime())
    const bash = await Language.load(grammarPath())
    const instance = new Parser()
    instance.setLanguage(bash)
    return instance
  })().catch((error) => {
    parser = undefined
    throw error
  })
  return parser
}

/**
 * Every simple command in a command string, nested ones included (pipelines, lists, subshells,
 * `$(…)`, backticks, process substitution, here-doc bodies), in document order — the same set
 * opencode's bash tool asks the `bash` permission for.
 */
export async function parseSimpleCommands(command: string): Promise<SimpleCommand[]> {
  const tree = (await loadBashParser()).parse(command)
  if (!tree) throw new Error("the bash parser returned no tree")
  try {
    return tree.rootNode.descendantsOfType("command").flatMap((node) => (node ? [simpleCommand(node)] : []))
  } finally {
    tree.delete()
  }
}

function simpleCommand(node: Node): SimpleCommand {
  const words: string[] = []
  const argv: string[] = []
  for (const child of node.children) {
    if (!child || REDIRECT_TYPES.has(child.type)) continue
    if (WORD_TYPES.has(child.type)) words.push(child.text)
    argv.push(child.text)
  }
  const statement = node.parent?.type === "redirected_statement" ? node.parent : node
  return { text: statement.text.trim(), words, argv }
}
