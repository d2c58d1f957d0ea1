/**
 * Builds what the npm package ships (npm `prepack` runs it; `npm run build` too):
 * `dist/index.js`, one file with zod bundled, plus lazily imported chunks (re2js) and
 * `dist/bash-parser-worker.js`, the shell parser's worker with web-tree-sitter and its wasm beside it, so opencode's install (scripts off) needs no
 * dependencies of ours and the plugin loads as it does from source.
 * It also copies the bash grammar into `grammar/` when `tree-sitter-bash` is installed, so the
 * tarball carries the 1.4 MB wasm file instead of depending on the 20 MB package.
 * And it writes the package README from the repository README's user-facing sections, so the
 * two never drift (the repository README is the one source), and copies the repository's `docs/`
 * pages beside it, which those sections link to.
 * The source path (`src/index.ts`) stays the development entry; nothing here is needed to run it.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"

const packageDir = join(import.meta.dir, "..")
const repositoryReadme = join(packageDir, "../../README.md")
// The repository README's sections that a user of the package needs, in this order.
const PACKAGE_README_SECTIONS = [
  "What it does",
  "What you see",
  "Install into opencode",
  "The five tools",
  "Options",
  "Delivery and waking",
  "Safety",
  "Limits",
  "Troubleshooting",
]
const repositoryDocs = join(packageDir, "../../docs")
const packageDocs = join(packageDir, "docs")
const distDir = join(packageDir, "dist")
const grammarDir = join(packageDir, "grammar")
const GRAMMAR_FILE = "tree-sitter-bash.wasm"
// Never bundled: the grammar is shipped as a file in grammar/ (copyGrammar), not as the package.
const EXTERNAL = ["tree-sitter-bash"]
// web-tree-sitter is bundled; its code loads this file from beside the chunk it lands in.
const PARSER_WASM = "tree-sitter.wasm"

async function bundle(): Promise<void> {
  // Files are overwritten in place and only stale ones removed afterwards: removing dist/ first
  // would make the folder vanish for a moment under a test runner scanning the tree in parallel.
  const before = listFiles(distDir)
  const result = await Bun.build({
    // The bash parser runs in a worker of its own (src/permission/bash-parser-worker.ts): its own entry.
    entrypoints: [join(packageDir, "src/index.ts"), join(packageDir, "src/permission/bash-parser-worker.ts")],
    outdir: distDir,
    target: "bun",
    format: "esm",
    // Keeps `await import("re2js")` a separate chunk, loaded only when a pattern is compiled.
    splitting: true,
    naming: { entry: "[name].[ext]", chunk: "chunks/[name]-[hash].[ext]" },
    external: EXTERNAL,
  })
  if (!result.success) {
    for (const log of result.logs) console.error(log)
    throw new Error("bun build failed: see the messages above")
  }
  const written = new Set<string>()
  for (const output of result.outputs) {
    console.log(`built ${relative(packageDir, output.path)} (${output.size} bytes)`)
    written.add(output.path)
    if ((await Bun.file(output.path).text()).includes(`"${PARSER_WASM}"`))
      written.add(copyParserWasm(dirname(output.path)))
  }
  for (const stale of before.filter((path) => !written.has(path))) rmSync(stale)
}

function listFiles(dir: string): string[] {
  if (!existsSync(dir)) return []
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
}

/** The bundled web-tree-sitter looks for its runtime wasm next to its own chunk. */
function copyParserWasm(chunkDir: string): string {
  const source = findInNodeModules(join("web-tree-sitter", PARSER_WASM))
  if (!source) throw new Error(`a chunk loads ${PARSER_WASM}, but web-tree-sitter is not installed: run npm install`)
  const target = join(chunkDir, PARSER_WASM)
  copyFileSync(source, target)
  console.log(`parser: copied ${source} to ${relative(packageDir, target)}`)
  return target
}

/** The first `node_modules/<relative>` found walking up from the package dir (workspaces hoist). */
function findInNodeModules(relativePath: string): string | undefined {
  let dir = packageDir
  for (;;) {
    const candidate = join(dir, "node_modules", relativePath)
    if (existsSync(candidate)) return candidate
    const parent = dirname(dir)
    if (parent === dir) return undefined
    dir = parent
  }
}

function copyGrammar(): void {
  const source = findInNodeModules(join("tree-sitter-bash", GRAMMAR_FILE))
  if (!source) {
    console.log(
      `grammar: tree-sitter-bash is not installed, so there is no ${GRAMMAR_FILE} to ship; grammar/ left as it is`,
    )
    return
  }
  mkdirSync(grammarDir, { recursive: true })
  copyFileSync(source, join(grammarDir, GRAMMAR_FILE))
  console.log(`grammar: copied ${source} to ${relative(packageDir, join(grammarDir, GRAMMAR_FILE))}`)
}

/** `## <title>` up to the next `## ` heading (its `###` subsections included). */
function section(readme: string, title: string): string {
  const start = readme.indexOf(`\n## ${title}\n`)
  if (start < 0) throw new Error(`README.md has no "## ${title}" section, which the package README needs`)
  const end = readme.indexOf("\n## ", start + 1)
  return readme.slice(start + 1, end < 0 ? undefined : end).trimEnd()
}

function writePackageReadme(): void {
  const readme = readFileSync(repositoryReadme, "utf8")
  const parts = [
    "# opencode-monitor",
    ...PACKAGE_README_SECTIONS.map((title) => section(readme, title)),
    // The project has no public repository, so package.json names none and neither does this.
    "## License\n\nMIT.",
  ]
  writeFileSync(join(packageDir, "README.md"), `${parts.join("\n\n")}\n`)
  console.log(`readme: README.md written from the repository README (${PACKAGE_README_SECTIONS.length} sections)`)
}

/** The README's sections link to `docs/<page>.md`, so the package carries those pages. */
function copyDocs(): void {
  const pages = readdirSync(repositoryDocs).filter((name) => name.endsWith(".md"))
  mkdirSync(packageDocs, { recursive: true })
  for (const page of pages) copyFileSync(join(repositoryDocs, page), join(packageDocs, page))
  for (const stale of readdirSync(packageDocs).filter((name) => !pages.includes(name))) rmSync(join(packageDocs, stale))
  console.log(`docs: copied ${pages.length} pages into docs/`)
}

await bundle()
copyGrammar()
writePackageReadme()
copyDocs()
