// The tested opencode releases, and the check that the running one has the API we use. No imports: the TUI uses it.

/** Oldest first. `npm test` runs the live suite on the newest and a core subset on the oldest. */
export const TESTED_OPENCODE = ["1.18.32", "1.18.33"] as const

export const TESTED_TEXT = `opencode ${TESTED_OPENCODE[0]}–${TESTED_OPENCODE[TESTED_OPENCODE.length - 1]}`

/** An API named by its path from the object opencode hands the part (`api.`: the TUI's own), then its use. */
type Requirement = { api: string; path: readonly string[]; kind: "function" | "object" | "string" }
const need = (api: string, kind: Requirement["kind"] = "function"): Requirement => ({
  api,
  path: (api.split(" ")[0] as string).replace(/^api\./, "").split("."),
  kind,
})

/** What the server part reads at load. `ctx.ask` is only seen in a tool call: `askReturned` checks it there. */
export const SERVER_API: readonly Requirement[] = [
  need("client.session.promptAsync (prompts with noReply)"),
  need("client.session.status (session status)"),
  need("client.session.messages (message listing)"),
  need("client.session.get (session parent)"),
  need("client.app.log (server log)"),
  need("client.tui.showToast (toasts)"),
  need("directory (the project directory)", "string"),
]

/** What the TUI part uses of opencode's TUI plugin API: its slots, dialogs, toasts, state and keymap. */
export const TUI_API: readonly Requirement[] = [
  need("api.slots.register (sidebar slot)"),
  need("api.ui.dialog.replace (dialog)"),
  need("api.ui.dialog.clear (dialog)"),
  need("api.ui.DialogSelect (dialog)"),
  need("api.ui.DialogConfirm (dialog)"),
  need("api.ui.toast (toasts)"),
  need("api.keymap.registerLayer (the Monitors command)"),
  need("api.route (current session)", "object"),
  need("api.state.session.messages (message listing)"),
  need("api.state.part (message parts)"),
  need("api.state.path (project directory)", "object"),
  need("api.theme (colours)", "object"),
  need("api.lifecycle.onDispose (cleanup)"),
]

function lookup(host: unknown, path: readonly string[]): unknown {
  let value = host
  for (const key of path) {
    if ((typeof value !== "object" && typeof value !== "function") || value === null) return undefined
    try {
      value = (value as Record<string, unknown>)[key]
    } catch {
      return undefined
    }
  }
  return value
}

/** The one message a host without some API gets: what is missing, and which releases were tested. */
export function missingApiMessage(part: "server" | "TUI", missing: readonly string[]): string {
  return (
    `opencode-monitor (${part} part) is disabled: this opencode lacks ${missing.join(", ")}. ` +
    `It is tested on ${TESTED_TEXT} (opencode 1.x); use one of those releases or a newer 1.x that has it.`
  )
}

/** `ctx.ask` must return a promise that rejects on "reject": 1.14's Effect, awaited, let every command run unasked. */
export function askReturned(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === "function"
}

/** Calls the host's function at `path`, never throwing or rejecting: reporting must not fail the load. */
function quietly(host: unknown, path: readonly string[], argument: unknown): boolean {
  const call = lookup(host, path)
  if (typeof call !== "function") return false
  try {
    const result = call.call(lookup(host, path.slice(0, -1)), argument)
    if (askReturned(result)) Promise.resolve(result).catch(() => {})
    return true
  } catch {
    return false
  }
}

/** Where a part shows a toast (both log through `client.app.log`), and how its calls wrap their fields. */
type Voice = { toast: readonly string[]; wrap: (fields: object) => unknown }

/** Every API there? Else a log line and a toast say what is missing (stderr for the server only, not the TUI). */
function hostReady(host: unknown, required: readonly Requirement[], part: "server" | "TUI", voice: Voice): boolean {
  const missing = required
    .filter(({ path, kind }) => {
      const value = lookup(host, path)
      return kind === "object" ? typeof value !== "object" || value === null : typeof value !== kind
    })
    .map(({ api }) => api)
  if (missing.length === 0) return true
  const message = missingApiMessage(part, missing)
  const line = { service: "opencode-monitor", level: "error", message, extra: { missing } }
  if (!quietly(host, ["client", "app", "log"], voice.wrap(line)) && part === "server") console.error(message)
  quietly(host, voice.toast, voice.wrap({ title: "opencode-monitor disabled", message, variant: "error" }))
  return false
}

export function serverHostReady(input: unknown): boolean {
  return hostReady(input, SERVER_API, "server", { toast: ["client", "tui", "showToast"], wrap: (body) => ({ body }) })
}

export function tuiHostReady(api: unknown): boolean {
  return hostReady(api, TUI_API, "TUI", { toast: ["ui", "toast"], wrap: (fields) => fields })
}
