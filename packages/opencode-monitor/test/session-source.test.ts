import { describe, expect, test } from "bun:test"
import { defaultMonitorConfig } from "../src/config"
import { classifySession, routeBatch, SessionSources } from "../src/delivery/session-source"
import type { OutputBatch } from "../src/pipeline/batcher"
import { createMonitorPlugin } from "../src/plugin"
import { FakeScheduler } from "./support/fake-scheduler"
import { FakeSessionApi, settle } from "./support/fake-session-api"
import { sizedLine } from "./support/lines"

const terminal: OutputBatch = {
  monitorId: "mon_1",
  batchSeq: 3,
  lines: [],
  stillRunning: false,
  status: { kind: "exited", code: 1 },
  dropped: { matched: 0, unmatched: 0, bytes: 0 },
  bytes: 0,
}
const streaming: OutputBatch = { ...terminal, batchSeq: 1, stillRunning: true, status: { kind: "running" } }

describe("classifySession", () => {
  const api = new FakeSessionApi(() => 0)
  api.parents.set("ses_child", "ses_mid")
  api.parents.set("ses_mid", "ses_root")

  test("a session without parent is primary", async () => {
    expect(await classifySession(api, "ses_root", "build", [])).toEqual({ kind: "primary" })
  })

  test("a session with a parentID is a subagent, with its root primary session", async () => {
    expect(await classifySession(api, "ses_child", "general", [])).toEqual({
      kind: "subagent",
      parentID: "ses_mid",
      rootID: "ses_root",
    })
  })

  test("an automation agent wins over everything, even a parentID", async () => {
    expect(await classifySession(api, "ses_child", "ci-bot", ["ci-bot"])).toEqual({
      kind: "automation",
      agent: "ci-bot",
    })
  })

  test("a failed lookup throws: the caller decides", async () => {
    const failing = { parentOf: async () => Promise.reject(new Error("500")) }
    await expect(classifySession(failing, "ses_x", "build", [])).rejects.toThrow("500")
  })
})

describe("SessionSources", () => {
  test("a lookup that keeps failing counts as primary for that batch, and is not cached", async () => {
    const scheduler = new FakeScheduler()
    const api = new FakeSessionApi(() => scheduler.now())
    api.parents.set("ses_child", "ses_root")
    const sources = new SessionSources(api, [], { scheduler, delayMs: 1_000 })
    api.parentFailures = 4 // the lookup at start, then the three of the first exit notice
    await sources.learn("ses_child", "general")
    expect(sources.cached("ses_child")).toBeUndefined()
    const first = sources.sourceOf("ses_child")
    for (let i = 0; i < 5; i++) {
      scheduler.advance(1_000)
      await settle()
    }
    expect(await first).toEqual({ kind: "primary" })
    expect(sources.cached("ses_child")).toBeUndefined()
    expect(await sources.sourceOf("ses_child")).toEqual({ kind: "subagent", parentID: "ses_root", rootID: "ses_root" })
    expect(sources.cached("ses_child")).toEqual({ kind: "subagent", parentID: "ses_root", rootID: "ses_root" })
  })
})

describe("SessionSources at monitor_start", () => {
  test("a lookup the server never answers holds the start 5 s at most; the exit's routing asks again", async () => {
    const scheduler = new FakeScheduler()
    let asked = 0
    const api = {
      parentOf: () => (++asked === 1 ? new Promise<string | undefined>(() => {}) : Promise.resolve(undefined)),
      log: () => {},
    }
    const sources = new SessionSources(api, [], { scheduler, delayMs: 1_000 })
    let learned = false
    void sources.learn("ses_busy", "build").then(() => {
      learned = true
    })
    scheduler.advance(4_999)
    await settle()
    expect(learned).toBe(false)
    scheduler.advance(1)
    await settle()
    expect(learned).toBe(true)
    expect(sources.cached("ses_busy")).toBeUndefined()
    expect(await sources.sourceOf("ses_busy")).toEqual({ kind: "primary" })
  })
})

describe("routeBatch", () => {
  const subagent = { kind: "subagent" as const, parentID: "ses_mid", rootID: "ses_root" }

  test("primary: observations and the wake go to its own session", () => {
    expect(routeBatch({ kind: "primary" }, "ses_p", streaming, "off")).toEqual([{ sessionID: "ses_p", wake: false }])
    expect(routeBatch({ kind: "primary" }, "ses_p", terminal, "off")).toEqual([{ sessionID: "ses_p", wake: true }])
  })

  test("a person's stop from the TUI goes to the owning session as an observation: nobody is woken", () => {
    const personStop = { ...terminal, status: { kind: "stopped" as const, signal: "SIGTERM", byPerson: true as const } }
    expect(routeBatch({ kind: "primary" }, "ses_p", personStop, "parent")).toEqual([
      { sessionID: "ses_p", wake: false },
    ])
    expect(routeBatch(subagent, "ses_child", personStop, "parent")).toEqual([{ sessionID: "ses_child", wake: false }])
  })

  test("subagent with subagent_wake=off: the child keeps the exit notice as an observation, nobody is woken", () => {
    expect(routeBatch(subagent, "ses_child", terminal, "off")).toEqual([{ sessionID: "ses_child", wake: false }])
  })

  test("subagent by default (parent): the exit notice wakes the root session only, naming the child", () => {
    expect(defaultMonitorConfig().subagent_wake).toBe("parent")
    expect(routeBatch(subagent, "ses_child", terminal, "parent")).toEqual([
      { sessionID: "ses_root", wake: true, subagentSessionID: "ses_child" },
    ])
    expect(routeBatch(subagent, "ses_child", streaming, "parent")).toEqual([{ sessionID: "ses_child", wake: false }])
  })

  test("automation is never woken", () => {
    expect(routeBatch({ kind: "automation", agent: "bot" }, "ses_a", terminal, "parent")).toEqual([
      { sessionID: "ses_a", wake: false },
    ])
  })

  describe("a running batch carrying a wake_pattern match is routed like the exit notice", () => {
    const line = sizedLine(4, "stdout", "ready on :3000", { wake: true })
    const matched: OutputBatch = { ...streaming, lines: [line] }

    test("primary: it may wake its own session", () => {
      expect(routeBatch({ kind: "primary" }, "ses_p", matched, "off")).toEqual([{ sessionID: "ses_p", wake: true }])
    })

    test("subagent: the child is never woken; by default (parent) the root is, naming the child", () => {
      expect(routeBatch(subagent, "ses_child", matched, "off")).toEqual([{ sessionID: "ses_child", wake: false }])
      // The child keeps the running lines as an observation; the root gets the match wake.
      expect(routeBatch(subagent, "ses_child", matched, defaultMonitorConfig().subagent_wake)).toEqual([
        { sessionID: "ses_child", wake: false },
        { sessionID: "ses_root", wake: true, subagentSessionID: "ses_child" },
      ])
      // A match in the terminal batch: like any exit notice, only the root gets it.
      const ended: OutputBatch = { ...matched, stillRunning: false, status: { kind: "exited", code: 0 } }
      expect(routeBatch(subagent, "ses_child", ended, "parent")).toEqual([
        { sessionID: "ses_root", wake: true, subagentSessionID: "ses_child" },
      ])
    })

    test("automation: never woken by a match", () => {
      expect(routeBatch({ kind: "automation", agent: "bot" }, "ses_a", matched, "parent")).toEqual([
        { sessionID: "ses_a", wake: false },
      ])
    })
  })
})

describe("events are routed by the session they belong to", () => {
  function plugin() {
    const scheduler = new FakeScheduler()
    const api = new FakeSessionApi(() => scheduler.now())
    scheduler.advance(1_000_000)
    api.parents.set("ses_child", "ses_parent")
    const instance = createMonitorPlugin({ ...defaultMonitorConfig(), subagent_wake: "parent" }, { api, scheduler })
    const idle = (sessionID: string) =>
      instance.hooks.event?.({ event: { type: "session.idle", properties: { sessionID } } as never })
    return { api, instance, idle }
  }

  test("a child going idle while its parent is busy never flushes into the parent", async () => {
    const { api, instance, idle } = plugin()
    api.busy.ses_parent = "busy"
    api.busy.ses_child = "busy"
    instance.router.injector.enqueue(
      terminal,
      { sessionID: "ses_parent", wake: true, subagentSessionID: "ses_child" },
      "t",
    )
    instance.router.injector.enqueue(streaming, { sessionID: "ses_child", wake: false }, "t")
    await settle()
    delete api.busy.ses_child
    await idle("ses_child")
    await settle()
    expect(api.sent.map((p) => p.sessionID)).toEqual(["ses_child"])
    expect(instance.router.injector.pending("ses_parent")).toHaveLength(1)
    await instance.hooks.dispose?.()
  })

  test("a parent that went idle first stays idle when a child's event arrives after it", async () => {
    const { api, instance, idle } = plugin()
    api.busy.ses_parent = "busy"
    instance.router.injector.enqueue(
      terminal,
      { sessionID: "ses_parent", wake: true, subagentSessionID: "ses_child" },
      "t",
    )
    await settle()
    expect(api.sent).toEqual([])
    // The parent finished; the child's busy status arrives after it and is in the very state the
    // parent's check reads: it must not hide the parent's idle.
    delete api.busy.ses_parent
    api.busy.ses_child = "busy"
    await instance.hooks.event?.({
      event: { type: "session.status", properties: { sessionID: "ses_child", status: { type: "busy" } } } as never,
    })
    await idle("ses_parent")
    await settle()
    expect(api.sent.map((p) => [p.sessionID, p.noReply])).toEqual([["ses_parent", false]])
    expect(api.sent[0]?.text).toContain("subagent_session: ses_child")
    await instance.hooks.dispose?.()
  })
})
