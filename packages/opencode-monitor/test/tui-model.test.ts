import { afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseStopRequest } from "../src/state/stop-requests"
import type { LocalSnapshot } from "../src/tui/local-state"
import { detailDialog, listDialog, monitorsOfSession, requestStop, sessionOfRoute } from "../src/tui/model"
import type { MonitorView } from "../src/tui/view"

const roots: string[] = []
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true })
})

function monitor(overrides: Partial<MonitorView> = {}): MonitorView {
  return {
    id: "mon_00000001",
    sessionID: "ses_1",
    label: "build",
    startedAt: 1_000,
    endedAt: undefined,
    status: { kind: "running" },
    ending: undefined,
    linesSeen: 3,
    lastLines: [],
    serverPid: 1,
    ...overrides,
  }
}

const snapshot = (monitors: MonitorView[], liveServers: number[] = [1]): LocalSnapshot => ({
  monitors,
  notes: [],
  liveServers,
})

describe("what the TUI shows (tui/model.ts)", () => {
  test("a live local server's record wins; without one, the session's messages are read", () => {
    const local = monitorsOfSession(
      snapshot([monitor(), monitor({ id: "mon_2", sessionID: "ses_2" })]),
      "ses_1",
      () => {
        throw new Error("the messages are not read when a local record exists")
      },
      5_000,
    )
    expect(local).toMatchObject({ local: true, monitors: [{ id: "mon_00000001" }] })
    let read = 0
    const remote = monitorsOfSession(
      snapshot([], []),
      "ses_1",
      () => {
        read++
        return []
      },
      5_000,
    )
    expect(remote).toEqual({ monitors: [], local: false, notes: [] })
    expect(read).toBe(1)
  })

  test("Stop is offered only for a running monitor whose local server can take a request", () => {
    const actions = (m: MonitorView, local: boolean) =>
      detailDialog(m, local, 2_000)
        .options.filter((o) => o.category === "Actions")
        .map((o) => o.value)
    expect(actions(monitor(), true)).toEqual(["stop", "refresh", "back"])
    expect(actions(monitor({ serverPid: undefined }), true)).toEqual(["refresh", "back"])
    expect(actions(monitor({ status: { kind: "exited", code: 0 } }), true)).toEqual(["refresh", "back"])
    const remote = detailDialog(monitor(), false, 2_000)
    expect(remote.options.map((o) => o.value)).not.toContain("stop")
    expect(remote.options.some((o) => o.title.startsWith("Stop is not available"))).toBe(true)
  })

  test("the list names an empty session, and a remote one gets the note", () => {
    expect(listDialog({ monitors: [], local: true, notes: [] }, 0).title).toBe("Monitors: none in this session")
    const remote = listDialog({ monitors: [monitor()], local: false, notes: [] }, 2_000)
    expect(remote.options.map((o) => o.value)).toEqual(["mon_00000001", "note:(from messages; stop unavailable)"])
  })

  test("a stop is a request file addressed to the monitor's server; a failure is said, never thrown", () => {
    const folder = mkdtempSync(join(tmpdir(), "omo-tui-model-"))
    roots.push(folder)
    expect(requestStop(folder, "ses_1", monitor({ serverPid: 77 })).variant).toBe("info")
    const [name] = readdirSync(join(folder, "stop-requests"))
    const request = parseStopRequest(readFileSync(join(folder, "stop-requests", name as string), "utf8"))
    expect(request).toMatchObject({ serverPid: 77, sessionID: "ses_1", monitorId: "mon_00000001" })
    const failed = requestStop("/proc/no-such-folder", "ses_1", monitor())
    expect(failed.variant).toBe("error")
    expect(failed.message).toContain("ask the agent to call monitor_stop")
  })

  test("only a session route has a session", () => {
    expect(sessionOfRoute({ name: "session", params: { sessionID: "ses_9" } })).toBe("ses_9")
    expect(sessionOfRoute({ name: "home" })).toBeUndefined()
    expect(sessionOfRoute({ name: "session", params: {} })).toBeUndefined()
  })
})
