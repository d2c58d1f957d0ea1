/**
 * The monitored command of the settle rows: prints `WAKE <n>` lines (the wake_pattern's match) and
 * records when each was written, on the clock every process shares (timeOrigin + now, in ms).
 * Each episode is the match, then a line every 50–100 ms for `burstMs` (none when 0), then `gapMs`
 * of silence.
 * Usage: bun settle-producer.ts <episodes> <burstMs> <gapMs> <times file>; the times are written to
 * the file as a JSON array once every episode was printed.
 */
import { writeFileSync, writeSync } from "node:fs"
import { prng } from "./streams.ts"

const [episodes, burstMs, gapMs, timesFile] = process.argv.slice(2).map((arg, i) => (i < 3 ? Number(arg) : arg))
if (!(Number(episodes) > 0) || !(Number(burstMs) >= 0) || !(Number(gapMs) > 0) || typeof timesFile !== "string")
  throw new Error("usage: settle-producer.ts <episodes> <burstMs> <gapMs> <times file>")

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const now = () => performance.timeOrigin + performance.now()
const random = prng(7)
const printedAt: number[] = []
for (let episode = 1; episode <= Number(episodes); episode++) {
  // Taken just before a synchronous write: the line is in the pipe microseconds later.
  printedAt.push(now())
  writeSync(1, `WAKE ${episode}\n`)
  const until = now() + Number(burstMs)
  for (let line = 1; now() < until; line++) {
    await sleep(50 + random() * 50)
    writeSync(1, `after ${episode}.${line}\n`)
  }
  await sleep(Number(gapMs))
}
writeFileSync(timesFile, JSON.stringify(printedAt))
