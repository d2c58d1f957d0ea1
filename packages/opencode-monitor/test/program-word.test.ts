import { describe, expect, test } from "bun:test"
import { programName, programWord } from "../src/process/program-word"

describe("the program word of a simple command", () => {
  test.each([
    [["npm", "run", "dev"], "npm"],
    [["KEY=secret", "npm", "start"], "npm"],
    [["A=1", "B=2", "exec", "node", "server.js"], "node"],
    [["command", "rm", "-rf", "x"], "rm"],
    [["command", "-p", "ls"], "ls"],
    [["command", "-v", "ls"], "command"],
    [["builtin", "echo", "hi"], "echo"],
    [["exec", "-a", "name", "sleep", "5"], "sleep"],
    [["env", "-i", "FOO=1", "python3", "x.py"], "python3"],
    [["nohup", "./run.sh"], "./run.sh"],
    [["'npm'", "test"], "npm"],
    [["exec"], "exec"],
    [["FOO=1"], undefined],
  ])("%j → %j", (words, expected) => {
    expect(programWord(words)).toBe(expected)
  })

  test("a KEY=secret prefix never becomes the default label", () => {
    expect(programName(["API_TOKEN=hunter2", "/usr/local/bin/server", "--port", "1"])).toBe("server")
    expect(programName(["API_TOKEN=hunter2"])).toBe("command")
  })
})
