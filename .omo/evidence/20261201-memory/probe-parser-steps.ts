import { createRequire } from "node:module"
import { heapStats } from "bun:jsc"
const require = createRequire(import.meta.url)
const MB = 2 ** 20
const f = (t: string) => { Bun.gc(true); const m = process.memoryUsage(); const h = heapStats(); console.log(t, `rss=${(m.rss/MB).toFixed(1)} ext=${(m.external/MB).toFixed(1)} ab=${(m.arrayBuffers/MB).toFixed(1)} heapSize=${(h.heapSize/MB).toFixed(1)} extra=${(h.extraMemorySize/MB).toFixed(1)}`) }
f("start")
const { Language, Parser } = await import("web-tree-sitter"); f("import")
await Parser.init({ locateFile: () => require.resolve("web-tree-sitter/tree-sitter.wasm") }); f("init")
const bash = await Language.load(require.resolve("tree-sitter-bash/tree-sitter-bash.wasm")); f("language")
const p = new Parser(); p.setLanguage(bash); f("parser")
p.parse("echo hi")!.delete(); f("parse")
