import { spawn } from "node:child_process"

/**
 * Runs `bun <script> <args…>` in a fresh process (so measurements cannot pollute each other) and
 * resolves with the JSON it printed on the line starting with `<marker> `; rejects with the end of
 * its stderr when it fails or prints no such line.
 */
export function resultOfChild<T>(
  script: string,
  args: readonly string[],
  marker: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "pipe"], env })
    let out = ""
    let err = ""
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString()
    })
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString()
    })
    child.once("error", reject)
    child.once("close", (code) => {
      const line = out.split("\n").find((l) => l.startsWith(`${marker} `))
      if (code !== 0 || !line) return reject(new Error(`${script} failed (code ${code}): ${err.slice(-2000)}`))
      resolve(JSON.parse(line.slice(marker.length + 1)) as T)
    })
  })
}
