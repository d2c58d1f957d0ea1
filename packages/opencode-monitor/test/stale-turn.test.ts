import { describe, expect, test } from "bun:test"
import { evaluateGates } from "../src/delivery/gates"
import type { SessionMessage } from "../src/delivery/session-api"

const message = (overrides: Partial<SessionMessage> & Pick<SessionMessage, "role" | "created">): SessionMessage => ({
  completed: undefined,
  finish: undefined,
  toolRunning: false,
  synthetic: false,
  agent: "build",
  model: undefined,
  notes: [],
  ...overrides,
})

// A person's prompt at 1 000, and the assistant turn it started, cut off by a crash (never completed).
const crashedTurn = [
  message({ role: "user", created: 1_000 }),
  message({ role: "assistant", created: 1_100, finish: "tool-calls", toolRunning: true }),
]
const gates = (messages: SessionMessage[], staleTurnsBefore: number | undefined) =>
  evaluateGates({
    sessionID: "ses_1",
    busy: {},
    messages,
    now: 100_000,
    user_message_window_ms: 2_000,
    staleTurnsBefore,
  })

describe("a turn cut off by a server crash", () => {
  test("does not hold deliveries once this server loaded after it started", () => {
    expect(gates(crashedTurn, 50_000)).toMatchObject({ open: true })
  })

  test("a turn started after this server loaded still holds them", () => {
    expect(gates(crashedTurn, 1_050)).toMatchObject({ open: false, reason: "assistant turn still running" })
    expect(gates(crashedTurn, undefined)).toMatchObject({ open: false, reason: "assistant turn still running" })
  })

  test("a session this server reports busy is never open, however old its turn", () => {
    const decision = evaluateGates({
      sessionID: "ses_1",
      busy: { ses_1: "busy" },
      messages: crashedTurn,
      now: 100_000,
      user_message_window_ms: 2_000,
      staleTurnsBefore: 50_000,
    })
    expect(decision).toMatchObject({ open: false, reason: "session busy" })
  })
})
