import { describe, expect, test } from "bun:test"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { CORE_ON_OLDEST, NEWEST_OPENCODE, OLDEST_OPENCODE } from "../../../scripts/test"
import { TESTED_OPENCODE, TESTED_TEXT } from "../src/host-check"

const ROOT = join(import.meta.dir, "../../..")
const json = (path: string) => JSON.parse(readFileSync(join(ROOT, path), "utf8"))
const PACKAGE = json("packages/opencode-monitor/package.json")
const WORKSPACE = json("package.json")
const prose = (path: string) => readFileSync(join(ROOT, path), "utf8").replace(/\s+/g, " ")
const README = prose("README.md")
const INSTALL_DOC = prose("docs/install.md")

/** `engines.opencode`: every 1.x release from the oldest tested one (2.x does not load 1.x plugins). */
const ENGINES_RANGE = `>=${TESTED_OPENCODE[0]} <2`

/** The tested releases are one list: the range, the README, the install page and the test matrix follow it. */
describe("the tested opencode releases", () => {
  test("engines.opencode is >=<oldest tested> <2, never one build", () => {
    expect(TESTED_OPENCODE.length).toBeGreaterThanOrEqual(2)
    expect(PACKAGE.engines.opencode).toBe(ENGINES_RANGE)
  })

  test("the README and the install page name the tested releases, the range, and that the package is for opencode 1.x", () => {
    expect(README).toContain(`It is for opencode 1.x, tested on ${TESTED_TEXT}`)
    expect(INSTALL_DOC).toContain(`It is for opencode 1.x, tested on ${TESTED_TEXT}`)
    expect(INSTALL_DOC).toContain(`\`engines.opencode\` is \`${ENGINES_RANGE}\``)
    expect(INSTALL_DOC).toContain(`Plugin requires opencode ${ENGINES_RANGE} but running`)
  })

  test("npm test runs the newest and the oldest, each a pinned devDependency", () => {
    expect([OLDEST_OPENCODE, NEWEST_OPENCODE]).toEqual([TESTED_OPENCODE[0], TESTED_OPENCODE.at(-1) as string])
    const dev = WORKSPACE.devDependencies as Record<string, string>
    expect(dev["opencode-ai"]).toBe(NEWEST_OPENCODE)
    for (const version of TESTED_OPENCODE.slice(0, -1)) {
      expect(dev[`opencode-ai-${version}`]).toBe(`npm:opencode-ai@${version}`)
    }
    // The types the plugin is written against are the newest tested release's.
    expect(PACKAGE.devDependencies["@opencode-ai/plugin"]).toBe(NEWEST_OPENCODE)
    expect(PACKAGE.devDependencies["@opencode-ai/sdk"]).toBe(NEWEST_OPENCODE)
    for (const file of CORE_ON_OLDEST) expect(existsSync(join(ROOT, file)) ? file : `missing ${file}`).toBe(file)
  })

  test("package.json os is Linux and macOS, as the README and the install page say", () => {
    expect([...PACKAGE.os].sort()).toEqual(["darwin", "linux"])
    expect(README).toContain("It runs on Linux or macOS (`os`:")
    expect(INSTALL_DOC).toContain("It runs on Linux or macOS (`os`:")
  })

  test("the packed package.json names no placeholder repository, homepage or bugs URL", () => {
    for (const key of ["repository", "homepage", "bugs"]) expect(PACKAGE[key]).toBeUndefined()
  })
})
