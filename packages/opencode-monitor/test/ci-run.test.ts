import { describe, expect, test } from "bun:test"
import { readFileSync } from "node:fs"
import { join } from "node:path"

const ROOT = join(import.meta.dir, "../../..")
const README = readFileSync(join(ROOT, "README.md"), "utf8")
const CI_RUN = readFileSync(join(ROOT, ".ci/run"), "utf8")
const WORKSPACE = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"))

/** The commands of the README's first ```sh block, without their comments. */
function readmeCommands(): string[] {
  const block = README.match(/```sh\n([\s\S]*?)```/)?.[1]
  if (!block) throw new Error("the README has no ```sh block of commands")
  return block
    .split("\n")
    .map((line) => line.replace(/#.*/, "").trim())
    .filter(Boolean)
}

/** The programs .ci/run installs where they are missing, from its `for tool in cmd:package ...` list. */
function ciTools(): string[] {
  const list = CI_RUN.match(/for tool in ([^;]+); do/)?.[1]
  if (!list) throw new Error(".ci/run has no `for tool in <command>:<package> ...; do` list")
  return list.split(/\s+/).map((pair) => pair.split(":")[0] as string)
}

/** The programs the README says the suite also needs: the backticked words of that sentence. */
function readmeTools(): string[] {
  const prose = README.replace(/\s+/g, " ")
  const sentence = prose.match(/It also needs ([^;.]*); `\.ci\/run` installs them/)?.[1]
  if (!sentence) throw new Error("the README has no sentence 'It also needs ...; `.ci/run` installs them'")
  return [...sentence.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string)
}

// The program each npm script may start, and the devDependency that installs it.
const PROGRAM_PACKAGES: Record<string, string> = { bun: "bun", tsc: "typescript", biome: "@biomejs/biome" }

describe("CI runs what the README promises, on a machine with only Node.js and npm", () => {
  test("the README's two commands are run by .ci/run, word for word", () => {
    const commands = readmeCommands()
    expect(commands).toEqual(["npm install && npm run demo", "npm install && npm test"])
    const ciLines = CI_RUN.split("\n").map((line) => line.trim())
    expect(ciLines).toContain("npm install && npm test")
    // The demo runs after that install, as the README's first command would.
    expect(ciLines.indexOf("npm run demo")).toBeGreaterThan(ciLines.indexOf("npm install && npm test"))
  })

  test("the programs .ci/run installs are the ones the README says the suite also needs", () => {
    expect(readmeTools().sort()).toEqual(ciTools().sort())
  })

  test("every program the npm scripts start is an exactly pinned devDependency", () => {
    const dev = WORKSPACE.devDependencies as Record<string, string>
    const scripts = Object.values(WORKSPACE.scripts as Record<string, string>)
    const programs = new Set(scripts.flatMap((script) => script.split("&&").map((part) => part.trim().split(" ")[0])))
    for (const program of programs) {
      const pkg = PROGRAM_PACKAGES[program as string]
      expect(pkg ? `${program}: ${dev[pkg]}` : `${program}: not a devDependency`).toMatch(/: \d+\.\d+\.\d+$/)
    }
    // opencode, which the demo and the live tests start, is pinned too.
    expect(dev["opencode-ai"]).toMatch(/^\d+\.\d+\.\d+$/)
  })
})
