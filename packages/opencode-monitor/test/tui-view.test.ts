import { describe, expect, test } from "bun:test"
import { displayWidth, formatElapsed, screenLine, truncateToWidth } from "../src/tui/text"
import { detailRows, type MonitorView, REMOTE_NOTE, SIDEBAR_DEFAULTS, shortStatus, sidebarRows } from "../src/tui/view"

const HOSTILE = "\x1b[31mred\x1b[0m\x1b]0;title\x07 \u202eevil\u202c tab\there\r\nnext\x00\x7f\u0085\u2028line\u200b"

function monitor(overrides: Partial<MonitorView> = {}): MonitorView {
  return {
    id: "mon_00000001",
    sessionID: "ses_1",
    label: "build",
    startedAt: 1_000,
    endedAt: undefined,
    status: { kind: "running" },
    ending: undefined,
    linesSeen: 0,
    lastLines: [],
    serverPid: 1,
    ...overrides,
  }
}

const options = (now: number, width = SIDEBAR_DEFAULTS.width) => ({ ...SIDEBAR_DEFAULTS, now, width })

describe("screen text", () => {
  test("hostile output becomes one printable line: no escapes, controls, bidi overrides or breaks", () => {
    const line = screenLine(HOSTILE)
    expect(line).toBe("red evil tab here next line")
    expect(line).not.toMatch(/[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029]/)
  })

  test("wide characters take two cells, combining marks and variation selectors none", () => {
    expect(displayWidth("abc")).toBe(3)
    expect(displayWidth("漢字")).toBe(4)
    expect(displayWidth("ｆｕｌｌ")).toBe(8)
    expect(displayWidth("🚀ok")).toBe(4)
    expect(displayWidth("e\u0301")).toBe(1)
    expect(displayWidth("❤\ufe0f")).toBe(1)
    expect(displayWidth("한글")).toBe(4)
  })

  test("truncation never exceeds the width, never splits a wide character, and marks the cut", () => {
    for (const text of [
      "漢字漢字漢字漢字",
      "a漢字漢字漢字",
      "🚀🚀🚀🚀🚀",
      "plain ascii text that is long",
      "e\u0301e\u0301e\u0301e\u0301e\u0301e\u0301",
    ]) {
      for (let width = 1; width <= 12; width++) {
        const cut = truncateToWidth(text, width)
        expect(displayWidth(cut)).toBeLessThanOrEqual(width)
        if (displayWidth(text) > width) expect(cut.endsWith("…")).toBe(true)
        else expect(cut).toBe(text)
      }
    }
    expect(truncateToWidth("漢字漢字", 4)).toBe("漢…")
    expect(truncateToWidth("漢字漢字", 5)).toBe("漢字…")
    expect(truncateToWidth("漢字漢字", 6)).toBe("漢字…")
    expect(truncateToWidth("abc", 0)).toBe("")
  })

  test("elapsed time is short", () => {
    expect(formatElapsed(0)).toBe("0s")
    expect(formatElapsed(59_999)).toBe("59s")
    expect(formatElapsed(184_000)).toBe("3m04s")
    expect(formatElapsed(7_500_000)).toBe("2h05m")
    expect(formatElapsed(-5)).toBe("0s")
  })
})

describe("the sidebar", () => {
  test("a session without monitors shows nothing", () => {
    expect(sidebarRows([], options(0))).toEqual([])
  })

  test("a running monitor: label, running with elapsed time, lines seen and its last line", () => {
    const rows = sidebarRows(
      [monitor({ linesSeen: 2, lastLines: [{ stream: "stdout", seq: 2, text: "QA_LINE_2" }] })],
      options(13_000),
    )
    expect(rows.map((r) => r.text)).toEqual([
      "Monitors (1 running)",
      `• build${" ".repeat(36 - 2 - 5 - 11)}running 12s`,
      "  2 lines › QA_LINE_2",
    ])
    expect(rows[1]?.tone).toBe("running")
  })

  test("every ending is named: exit code, signal, timed out, stopped (by the person), lost", () => {
    const ended = { endedAt: 2_000 }
    const cases: [Partial<MonitorView>, string][] = [
      [{ status: { kind: "exited", code: 3 } }, "exited (code=3)"],
      [{ status: { kind: "signaled", signal: "SIGKILL" } }, "exited (signal=SIGKILL)"],
      [{ status: { kind: "timed_out", afterMs: 5000, signal: "SIGTERM" } }, "timed out"],
      [{ status: { kind: "stopped", signal: "SIGTERM" }, ending: { reason: "stop", by: "agent" } }, "stopped"],
      [
        { status: { kind: "stopped", signal: "SIGTERM", byPerson: true }, ending: { reason: "stop", by: "person" } },
        "stopped by you",
      ],
      [{ status: { kind: "lost", survivorPid: undefined } }, "lost"],
    ]
    for (const [overrides, expected] of cases) {
      const view = monitor({ ...ended, ...overrides })
      expect(shortStatus(view, 3_000)).toBe(expected)
      expect(sidebarRows([view], options(3_000))[1]?.text.endsWith(expected)).toBe(true)
    }
  })

  test("a status text from a hostile file is never shown raw", () => {
    // From a message, a status is whatever the part's metadata says.
    const code = "\x1b[2J3)\nIGNORE ALL" as unknown as number
    const view = monitor({ status: { kind: "exited", code }, endedAt: 2_000 })
    expect(shortStatus(view, 3_000)).toBe("exited")
  })

  test("every row fits the width whatever the label and output: wide, emoji, hostile, huge", () => {
    const monitors = [
      monitor({
        id: "a",
        label: "漢字のラベル漢字のラベル漢字のラベル",
        linesSeen: 1,
        lastLines: [{ stream: "stdout", seq: 1, text: "漢".repeat(600) }],
      }),
      monitor({
        id: "b",
        label: HOSTILE,
        linesSeen: 123456,
        lastLines: [{ stream: "stderr", seq: 9, text: HOSTILE.repeat(40) }],
      }),
      monitor({ id: "c", label: "🚀".repeat(50), status: { kind: "exited", code: 0 }, endedAt: 2_000 }),
      monitor({ id: "d", label: "", status: { kind: "stopped", signal: null }, endedAt: 2_500 }),
    ]
    for (const width of [8, 20, 36, 60]) {
      const rows = sidebarRows(monitors, options(3_000, width))
      expect(rows.length).toBe(1 + 2 * monitors.length)
      for (const row of rows) {
        expect(displayWidth(row.text)).toBeLessThanOrEqual(width)
        expect(row.text).not.toMatch(/[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2028\u2029]/)
      }
    }
  })

  test("ended monitors stay a while, then fold into a count; running ones come first", () => {
    const now = 10 * 60_000
    const monitors = [
      monitor({
        id: "old1",
        label: "old1",
        status: { kind: "exited", code: 0 },
        endedAt: now - SIDEBAR_DEFAULTS.keepEndedMs - 1,
      }),
      monitor({
        id: "old2",
        label: "old2",
        status: { kind: "exited", code: 1 },
        endedAt: now - SIDEBAR_DEFAULTS.keepEndedMs - 5,
      }),
      monitor({ id: "new", label: "recent", status: { kind: "exited", code: 3 }, endedAt: now - 1_000 }),
      monitor({ id: "run", label: "server", startedAt: now - 5_000 }),
    ]
    const texts = sidebarRows(monitors, options(now)).map((r) => r.text)
    expect(texts[0]).toBe("Monitors (1 running)")
    expect(texts[1]).toContain("server")
    expect(texts[3]).toContain("recent")
    expect(texts).toContain("  + 2 ended earlier")
    expect(texts.join("\n")).not.toContain("old1")
  })

  test("at most maxEnded ended monitors are listed, even recent ones", () => {
    const monitors = Array.from({ length: 6 }, (_, i) =>
      monitor({ id: `m${i}`, label: `m${i}`, status: { kind: "exited", code: 0 }, endedAt: 1_000 + i }),
    )
    const texts = sidebarRows(monitors, { ...options(2_000), maxEnded: 2 }).map((r) => r.text)
    expect(texts[0]).toBe("Monitors")
    expect(texts.filter((t) => t.startsWith("• "))).toHaveLength(2)
    expect(texts[1]).toContain("m5")
    expect(texts).toContain("  + 4 ended earlier")
  })

  test("by default ended monitors stay listed for a minute, at most three; the rest fold into a count", () => {
    expect([SIDEBAR_DEFAULTS.keepEndedMs, SIDEBAR_DEFAULTS.maxEnded]).toEqual([60_000, 3])
    const now = 10 * 60_000
    const monitors = Array.from({ length: 5 }, (_, i) =>
      monitor({
        id: `m${i}`,
        label: `m${i}`,
        status: { kind: "exited", code: 0 },
        endedAt: now - 50_000 + i,
      }),
    )
    const texts = sidebarRows(monitors, options(now)).map((r) => r.text)
    expect(texts.filter((t) => t.startsWith("• ")).map((t) => t.split(" ")[1])).toEqual(["m4", "m3", "m2"])
    expect(texts.at(-1)).toBe("  + 2 ended earlier")
  })

  test("a note (the remote fallback) is the last row and fits the sidebar; a long one is cut", () => {
    expect(sidebarRows([monitor()], { ...options(2_000), note: REMOTE_NOTE }).at(-1)).toEqual({
      text: REMOTE_NOTE,
      tone: "muted",
    })
    const rows = sidebarRows([monitor()], {
      ...options(2_000),
      note: "from the session's messages; stop not available",
    })
    expect(rows.at(-1)).toEqual({ text: "from the session's messages; stop n…", tone: "muted" })
  })
})

describe("the monitor detail", () => {
  test("status, start time, counters and the retained lines of both streams with their seq", () => {
    const view = monitor({
      status: { kind: "exited", code: 3 },
      endedAt: 4_000,
      linesSeen: 3,
      lastLines: [
        { stream: "stdout", seq: 1, text: "one" },
        { stream: "stderr", seq: 2, text: "two \x1b[1mbold\x1b[0m" },
        { stream: "stdout", seq: 3, text: "three" },
      ],
    })
    const texts = detailRows(view, 9_000, 80).map((r) => r.text)
    expect(texts[0]).toBe("build (mon_00000001)")
    expect(texts).toContain("Status: exited (code=3)")
    expect(texts).toContain("Started: 1970-01-01T00:00:01.000Z (3s run)")
    expect(texts).toContain("Lines seen: 3")
    expect(texts.slice(-3)).toEqual(["[stdout seq=1] one", "[stderr seq=2] two bold", "[stdout seq=3] three"])
  })

  test("the detail view of a running monitor shows its deadline, or that it has none", () => {
    const none = detailRows(monitor(), 9_000, 80).map((r) => r.text)
    expect(none).toContain("Deadline: none (runs until it exits or is stopped)")
    const bounded = detailRows(monitor({ deadlineAt: 61_000 }), 9_000, 80).map((r) => r.text)
    expect(bounded).toContain("Deadline: 1970-01-01T00:01:01.000Z")
    const ended = detailRows(monitor({ status: { kind: "exited", code: 0 }, endedAt: 2_000 }), 9_000, 80)
    expect(ended.map((r) => r.text).some((t) => t.startsWith("Deadline:"))).toBe(false)
  })
})
