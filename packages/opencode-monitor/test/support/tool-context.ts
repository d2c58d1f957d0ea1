import type { ToolContext } from "@opencode-ai/plugin"

export type AskCall = { permission: string; patterns: string[]; always: string[]; metadata: Record<string, unknown> }

/** A ToolContext shaped like the one opencode passes to `execute`, with a scriptable `ask`. */
export function toolContext(
  sessionID: string,
  opts: { agent?: string; directory?: string; ask?: "allow" | "reject" | "absent"; asks?: AskCall[] } = {},
): ToolContext {
  const ctx: ToolContext = {
    sessionID,
    messageID: `msg_${Math.random().toString(36).slice(2)}`,
    agent: opts.agent ?? "build",
    directory: opts.directory ?? process.cwd(),
    worktree: opts.directory ?? process.cwd(),
    abort: new AbortController().signal,
    metadata() {},
    async ask(input) {
      opts.asks?.push(input)
      if (opts.ask === "reject") {
        const error = new Error("The user rejected permission to use this specific tool call.")
        error.name = "PermissionRejectedError"
        throw error
      }
    },
  }
  if (opts.ask === "absent") (ctx as { ask?: unknown }).ask = undefined
  return ctx
}
