/**
 * The bash parser's own thread, which keeps web-tree-sitter's fixed 32 MB wasm memory off the plugin's heap: counted
 * live there (twice), it let a flood's garbage grow ~110 MB more. Messages: `{ ready }` or `{ error }` once loaded,
 * then one ParseAnswer per ParseRequest.
 */
import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import { fileURLToPath } from "node:url"
import type { Node, Parser } from "web-tree-sitter"
import { errorText } from "../errors"
import type { ParseAnswer, ParseRequest, SimpleCommand } from "./bash-parser"

declare const self: Worker

const require = createRequire(import.meta.url)
// Packed, the grammar is in <package>/grammar/ (this code in dist/ or dist/chunks/); a checkout uses node_modules.
const PACKED_GRAMMAR = ["../grammar/", "../../grammar/"].map((dir) =>
  fileURLToPath(new URL(`${dir}tree-sitter-bash.wasm`, import.meta.url)),
)
// Child node types opencode 1.18.33's bash tool reads as a command's words.
const WORD_TYPES = new Set(["command_name", "word", "string", "raw_string", "concatenation"])
const REDIRECT_TYPES = new Set(["file_redirect", "heredoc_redirect", "herestring_redirect"])

/** web-tree-sitter's wasm from node_modules; bundled (packed), it finds the copy beside its chunk itself. */
function parserRuntime(): { locateFile: () => string } | undefined {
  try {
    const runtime = require.resolve("web-tree-sitter/tree-sitter.wasm")
    return { locateFile: () => runtime }
  } catch {
    return undefined
  }
}

async function loadParser(): Promise<Parser> {
  const { Language, Parser } = await import("web-tree-sitter")
  await Parser.init(parserRuntime())
  const grammar = PACKED_GRAMMAR.find(existsSync) ?? require.resolve("tree-sitter-bash/tree-sitter-bash.wasm")
  const bash = await Language.load(grammar)
  const instance = new Parser()
  instance.setLanguage(bash)
  return instance
}

/** The simple commands, or undefined as soon as their texts come to more than `maxChars`. */
function parseSimpleCommands(parser: Parser, { command, maxChars }: ParseRequest): SimpleCommand[] | undefined {
  const tree = parser.parse(command)
  if (!tree) throw new Error("the bash parser returned no tree")
  try {
    const commands: SimpleCommand[] = []
    let chars = 0
    for (const node of tree.rootNode.descendantsOfType("command")) {
      if (!node) continue
      const simple = simpleCommand(node)
      chars += simple.text.length + simple.words.join("").length + simple.argv.join("").length
      if (chars > maxChars) return undefined
      commands.push(simple)
    }
    return commands
  } finally {
    tree.delete()
  }
}

function simpleCommand(node: Node): SimpleCommand {
  const children = node.children.filter((child): child is Node => !!child && !REDIRECT_TYPES.has(child.type))
  const words = children.filter((child) => WORD_TYPES.has(child.type)).map((child) => child.text)
  const argv = children.map((child) => child.text)
  const statement = node.parent?.type === "redirected_statement" ? node.parent : node
  return { text: statement.text.trim(), words, argv }
}

function answer(parser: Parser, request: ParseRequest): ParseAnswer {
  try {
    const commands = parseSimpleCommands(parser, request)
    return commands ? { commands } : { tooLarge: true }
  } catch (error) {
    return { error: errorText(error) }
  }
}

try {
  const parser = await loadParser()
  self.onmessage = ({ data }: MessageEvent<ParseRequest>) => self.postMessage(answer(parser, data))
  self.postMessage({ ready: true })
} catch (error) {
  self.postMessage({ error: `cannot load the bash parser: ${errorText(error)}` })
}
