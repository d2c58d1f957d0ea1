import { closeSync, existsSync, openSync, statSync, writeSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

/** Deterministic PRNG (mulberry32): the same seed always gives the same stream. */
export function prng(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const WORDS = [
  "compiling",
  "module",
  "request",
  "GET",
  "/api/v1/items",
  "200",
  "ok",
  "cache",
  "hit",
  "miss",
  "worker",
  "listening",
  "on",
  "port",
  "3000",
  "bundle",
  "chunk",
  "test",
  "passed",
  "duration",
  "ms",
  "retry",
  "queue",
]
const UTF8_WORDS = ["héllo", "naïve", "日本語のログ", "компиляция", "✓", "🚀", "データベース", "ошибка", "→"]
const COLOURS = ["\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[1;34m", "\x1b[38;5;208m"]
const RESET = "\x1b[0m"

export type StreamComposition = { lines: number; bytes: number; kinds: Record<string, number> }

/**
 * One block of mixed output, like a dev server or test runner prints: short lines, ~200-byte log
 * lines, ANSI-coloured lines, UTF-8 text, a few lines with error/warn/FAIL, and now and then a
 * 10–20 KB line (a minified stack trace or a JSON dump).
 */
export function mixedBlock(seed: number, targetBytes: number): { block: Buffer; composition: StreamComposition } {
  const random = prng(seed)
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T
  const words = (count: number): string => {
    const out: string[] = []
    for (let i = 0; i < count; i++) out.push(pick(WORDS))
    return out.join(" ")
  }
  const parts: string[] = []
  const kinds: Record<string, number> = {}
  let bytes = 0
  let lines = 0
  while (bytes < targetBytes) {
    const r = random()
    let line: string
    let kind: string
    if (r < 0.3) {
      kind = "short"
      line = words(1 + Math.floor(random() * 4))
    } else if (r < 0.6) {
      kind = "log-200B"
      line = `[${String(lines).padStart(8, "0")}] INFO ${words(28)}`.slice(0, 190 + Math.floor(random() * 20))
    } else if (r < 0.78) {
      kind = "ansi"
      line = `${pick(COLOURS)}${words(3)}${RESET} ${words(6)} ${pick(COLOURS)}${pick(WORDS)}${RESET}`
    } else if (r < 0.93) {
      kind = "utf8"
      line = `${pick(UTF8_WORDS)} ${words(4)} ${pick(UTF8_WORDS)} ${pick(UTF8_WORDS)}`
    } else if (r < 0.9995) {
      kind = "error/warn/FAIL"
      line = `${pick(["error:", "warn:", "FAIL", "Error", "warning"])} ${words(10)}`
    } else {
      kind = "long-10-20KB"
      const target = 10_240 + Math.floor(random() * 10_240)
      let long = ""
      while (long.length < target) long += `${words(8)} {"k":${Math.floor(random() * 1e6)}} `
      line = long.slice(0, target)
    }
    parts.push(line)
    kinds[kind] = (kinds[kind] ?? 0) + 1
    lines++
    bytes += Buffer.byteLength(line) + 1
  }
  const block = Buffer.from(`${parts.join("\n")}\n`)
  return { block, composition: { lines, bytes: block.length, kinds } }
}

export type StreamFile = { path: string; bytes: number; lines: number; composition: StreamComposition }

/**
 * Writes the mixed stream to a temp file once (reused while its size matches), so a child can
 * `cat` it as fast as the pipe takes it. The file is a 4 MB block repeated.
 */
export function mixedStreamFile(totalBytes: number): StreamFile {
  const { block, composition } = mixedBlock(20240601, 4 * 1024 * 1024)
  const repeats = Math.max(1, Math.round(totalBytes / block.length))
  const path = join(tmpdir(), `omo-bench-mixed-v1-${repeats}x${block.length}.log`)
  const bytes = repeats * block.length
  if (!existsSync(path) || statSync(path).size !== bytes) {
    const fd = openSync(path, "w")
    try {
      for (let i = 0; i < repeats; i++) writeSync(fd, block)
    } finally {
      closeSync(fd)
    }
  }
  const kinds: Record<string, number> = {}
  for (const [kind, count] of Object.entries(composition.kinds)) kinds[kind] = count * repeats
  return {
    path,
    bytes,
    lines: composition.lines * repeats,
    composition: { lines: composition.lines * repeats, bytes, kinds },
  }
}

/** Quotes a string for `sh -c`. */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`
}
