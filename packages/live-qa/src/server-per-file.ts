/**
 * One ProjectServer for the tests of a file (bun:test hooks): started before the first test, the
 * projects a test opened stopped after it, the server stopped after the last test, leaving nothing.
 */
import { afterAll, afterEach, beforeAll, expect } from "bun:test"
import { type LiveProject, type ProjectOptions, type ProjectServer, startProjectServer } from "./monitor-qa.ts"
import type { StopReport } from "./opencode-server.ts"

export function serverPerFile(): {
  project(options?: ProjectOptions): Promise<LiveProject>
  /** Stops the server now: how its process group ended (for the file's last test, after it killed the server). */
  stop(): Promise<StopReport>
} {
  let server: ProjectServer | undefined
  const opened: LiveProject[] = []
  beforeAll(async () => {
    server = await startProjectServer()
  }, 30_000)
  // A test that failed before its own stop() leaves its project open.
  afterEach(async () => {
    for (const project of opened.splice(0)) await project.stop().catch(() => undefined)
  }, 30_000)
  afterAll(async () => {
    expect((await server?.stop())?.leftovers).toEqual([])
  }, 30_000)
  return {
    async project(options) {
      if (!server) throw new Error("the file's server did not start (see the beforeAll error)")
      const project = await server.project(options)
      opened.push(project)
      return project
    },
    stop() {
      if (!server) throw new Error("the file's server did not start (see the beforeAll error)")
      return server.stop()
    },
  }
}
