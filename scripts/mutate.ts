/**
 * The mutation check (`npm run mutate`): applies each mutation of `mutations.ts` to its source file,
 * runs the unit tests it names (stopping at the first failure), restores the file, and prints a
 * table. Every mutation must be killed: a survivor is a missing test. A mutation is anchored by the
 * declaration it lives in (`fn`) and a small pattern searched only there, so code may move around
 * it; when the declaration or the pattern is gone the mutation is STALE and the run fails.
 *
 *   npm run mutate                   every mutation
 *   npm run mutate -- gates budget   those whose id contains one of the words
 *   npm run mutate -- --anchors      only check that every anchor is found (no tests, a few seconds)
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import ts from "typescript"
import { MUTATIONS, type Mutation } from "./mutations"

const ROOT = resolve(import.meta.dir, "..")
const PLUGIN = join(ROOT, "packages/opencode-monitor")
const SRC = join(PLUGIN, "src")
const BUN = process.execPath
const MAX_MUTATIONS = 80
// A mutation that makes a test hang is noticed, but costs this much of the run.
const RUN_LIMIT_MS = 180_000

type Found = { path: string; text: string; at: number; length: number; moved: boolean }
type Verdict = "killed" | "SURVIVED" | "STALE" | "found"
type Outcome = { mutation: Mutation; verdict: Verdict; note: string; seconds: number }

const originals = new Map<string, string>()
function restoreAll(): void {
  for (const [path, text] of originals) writeFileSync(path, text)
  originals.clear()
}
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    restoreAll()
    process.exit(130)
  })
}

/** The name a declaration is known by: a function, method, accessor, class field, variable or object key. */
function declaredName(node: ts.Node): string | undefined {
  if (ts.isConstructorDeclaration(node)) return "constructor"
  const named =
    ts.isFunctionDeclaration(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node) ||
    ts.isPropertyDeclaration(node) ||
    ts.isPropertyAssignment(node) ||
    ts.isVariableDeclaration(node) ||
    ts.isClassDeclaration(node)
  return named && node.name && ts.isIdentifier(node.name) ? node.name.text : undefined
}

/** The spans of the declarations named `fn` (`name`, or `Class.member`) in one file. */
function declarationSpans(path: string, text: string, fn: string): [number, number][] {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true)
  const [owner, member] = fn.includes(".") ? (fn.split(".", 2) as [string, string]) : [undefined, fn]
  const spans: [number, number][] = []
  const visit = (node: ts.Node, className: string | undefined) => {
    if (declaredName(node) === member && (owner === undefined || className === owner)) {
      spans.push([node.getStart(source), node.getEnd()])
    }
    const inside = ts.isClassDeclaration(node) && node.name ? node.name.text : className
    ts.forEachChild(node, (child) => visit(child, inside))
  }
  visit(source, undefined)
  return spans
}

/** The pattern as written, except that any run of whitespace matches any run (a reformat keeps it). */
function patternOf(find: string): RegExp {
  const escaped = find.trim().replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
  return new RegExp(escaped.replace(/\s+/g, "\\s+"), "g")
}

/** Where the pattern occurs inside the declarations named `fn` of one file (each place once). */
function occurrences(path: string, mutation: Mutation): { text: string; at: number[]; length: number } | undefined {
  if (!existsSync(path)) return undefined
  const text = readFileSync(path, "utf8")
  const spans = declarationSpans(path, text, mutation.fn)
  if (spans.length === 0) return undefined
  const at = new Map<number, number>()
  for (const [start, end] of spans) {
    for (const match of text.slice(start, end).matchAll(patternOf(mutation.find))) {
      at.set(start + (match.index ?? 0), match[0].length)
    }
  }
  return { text, at: [...at.keys()], length: [...at.values()][0] ?? 0 }
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(path)
    return /\.tsx?$/.test(entry.name) && !entry.name.endsWith(".d.ts") ? [path] : []
  })
}

/**
 * The one place the mutation applies: the pattern once inside `fn` in its file, or, when the file
 * has no such declaration any more, once inside a declaration of that name elsewhere in src/ (the
 * code moved; the run says where). A string says why it is stale.
 */
function locate(mutation: Mutation): Found | string {
  const named = join(SRC, mutation.file)
  const here = occurrences(named, mutation)
  const where = `${mutation.fn} (${mutation.file})`
  if (here) {
    if (here.at.length === 1)
      return { path: named, text: here.text, at: here.at[0] as number, length: here.length, moved: false }
    return here.at.length === 0
      ? `its pattern is not in ${where} any more: update \`find\` (or \`fn\`) with the code`
      : `its pattern occurs ${here.at.length} times in ${where}: make \`find\` longer`
  }
  const elsewhere = sourceFiles(SRC).flatMap((path) => {
    const found = path === named ? undefined : occurrences(path, mutation)
    return found?.at.length === 1 ? [{ path, text: found.text, at: found.at[0] as number, length: found.length }] : []
  })
  if (elsewhere.length === 1) return { ...(elsewhere[0] as Omit<Found, "moved">), moved: true }
  return `no declaration named ${mutation.fn} holds its pattern in ${mutation.file}${elsewhere.length > 1 ? " (several elsewhere)" : ""}: update \`fn\`, \`file\` and \`find\``
}

/** Applies the mutation; a string says why it cannot be (stale, or the mutant does not parse). */
function apply(mutation: Mutation, found: Found): string | undefined {
  const mutant = found.text.slice(0, found.at) + mutation.replace + found.text.slice(found.at + found.length)
  try {
    new Bun.Transpiler({ loader: found.path.endsWith(".tsx") ? "tsx" : "ts" }).transformSync(mutant)
  } catch (error) {
    return `the mutant does not parse: fix \`replace\` (${String(error).split("\n")[0]})`
  }
  originals.set(found.path, found.text)
  writeFileSync(found.path, mutant)
  return undefined
}

const testFiles = (mutation: Mutation) => mutation.tests.map((test) => join(PLUGIN, "test", test))

function missingTests(mutation: Mutation): string | undefined {
  const missing = testFiles(mutation).filter((file) => !existsSync(file))
  if (missing.length === 0) return undefined
  return `test file ${missing.map((f) => relative(ROOT, f)).join(", ")} is missing: update \`tests\``
}

/** Runs the named tests against the mutant: which test noticed it, or a string saying why it is stale. */
function runTests(mutation: Mutation): { killed: boolean; by: string } | string {
  const files = testFiles(mutation)
  const only = mutation.only === undefined ? [] : ["-t", mutation.only]
  const result = Bun.spawnSync({
    cmd: [BUN, "test", "--bail", "--timeout", "60000", ...only, ...files],
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
    timeout: RUN_LIMIT_MS,
    env: { ...process.env, FORCE_COLOR: "0" },
  })
  const output = result.stdout.toString() + result.stderr.toString()
  if (/matched 0 tests/.test(output)) return `no test name matches \`only\` (${mutation.only}): update it`
  if (result.exitCode === 0) return { killed: false, by: "" }
  const failed = output.match(/^\(fail\) (.+?)(?: \[[\d.]+m?s\])?$/m)?.[1]
  const by = failed ?? (result.signalCode ? `the run hung past ${RUN_LIMIT_MS / 1000} s` : "an error outside any test")
  return { killed: true, by }
}

function check(mutation: Mutation, runTestsToo: boolean): Outcome {
  const t0 = performance.now()
  const seconds = () => (performance.now() - t0) / 1000
  const found = locate(mutation)
  if (typeof found === "string") return { mutation, verdict: "STALE", note: found, seconds: 0 }
  const missing = missingTests(mutation)
  if (missing) return { mutation, verdict: "STALE", note: missing, seconds: 0 }
  const moved = found.moved ? `; found in ${relative(SRC, found.path)}: update \`file\`` : ""
  const refused = apply(mutation, found)
  if (refused) return { mutation, verdict: "STALE", note: refused, seconds: 0 }
  try {
    if (!runTestsToo) return { mutation, verdict: "found", note: `anchor found${moved}`, seconds: seconds() }
    const result = runTests(mutation)
    if (typeof result === "string") return { mutation, verdict: "STALE", note: result, seconds: seconds() }
    return { mutation, verdict: result.killed ? "killed" : "SURVIVED", note: result.by + moved, seconds: seconds() }
  } finally {
    restoreAll()
  }
}

function main(): number {
  const args = process.argv.slice(2)
  const anchorsOnly = args.includes("--anchors")
  const words = args.filter((arg) => !arg.startsWith("--"))
  const problems: string[] = []
  if (new Set(MUTATIONS.map((m) => m.id)).size !== MUTATIONS.length) problems.push("two mutations share an id")
  if (MUTATIONS.length > MAX_MUTATIONS) {
    problems.push(
      `${MUTATIONS.length} mutations, at most ${MAX_MUTATIONS}: replace the least telling one instead of adding`,
    )
  }
  const selected = MUTATIONS.filter((m) => words.length === 0 || words.some((w) => m.id.includes(w)))
  const started = performance.now()
  const outcomes = selected.map((mutation) => {
    const outcome = check(mutation, !anchorsOnly)
    const time = anchorsOnly ? "" : ` ${outcome.seconds.toFixed(1)} s`
    console.log(`${outcome.verdict.padEnd(8)} ${mutation.id}${time}: ${outcome.note || "no test failed"}`)
    return outcome
  })
  const total = ((performance.now() - started) / 1000).toFixed(0)
  if (!anchorsOnly) {
    console.log("\n| # | mutation | anchor | killed by | s | verdict |\n|---|---|---|---|---|---|")
    outcomes.forEach(({ mutation: m, verdict, note, seconds }, i) => {
      const by = note.replaceAll("|", "\\|")
      console.log(
        `| ${i + 1} | ${m.id}: ${m.what} | ${m.file} › ${m.fn} | ${by} | ${seconds.toFixed(1)} | ${verdict} |`,
      )
    })
  }
  const killed = outcomes.filter((o) => o.verdict === (anchorsOnly ? "found" : "killed")).length
  const stale = outcomes.filter((o) => o.verdict === "STALE").length
  const survived = outcomes.length - killed - stale
  const what = anchorsOnly ? "anchors found" : "killed"
  console.log(`\n${killed} of ${outcomes.length} ${what}, ${survived} survived, ${stale} stale, in ${total} s`)
  for (const problem of problems) console.log(problem)
  return killed === outcomes.length && problems.length === 0 ? 0 : 1
}

process.exitCode = main()
