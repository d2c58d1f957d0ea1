/**
 * TEST-ONLY plugin entry: the real opencode-monitor entry, except that `chat.message` of a person's
 * message saying `RACE <file>` first touches <file> (the monitor prints, or exits, when it appears) and
 * waits until the plugin stored what followed. That is a prompt of ours whose send was on its way as
 * the person wrote, made certain rather than left to timing. Never shipped.
 */
import { writeFileSync } from "node:fs"
import type { Plugin, PluginInput, PluginModule } from "@opencode-ai/plugin"
import monitor from "../../opencode-monitor/src/index.ts"

const server: Plugin = async (input, options) => {
  const hooks = await monitor.server(input, options)
  const chatMessage = hooks["chat.message"]
  return {
    ...hooks,
    async "chat.message"(hookInput, output) {
      const text = output.parts.map((p) => (p.type === "text" && !p.synthetic ? p.text : "")).join("\n")
      const file = /^RACE (\S+)$/m.exec(text)?.[1]
      if (file) await observationAfter(input.client, output.message, file)
      await chatMessage?.(hookInput, output)
    },
  }
}

/** Touches `file`, then waits (at most 15 s) for an observation created after `message`. */
async function observationAfter(
  client: PluginInput["client"],
  message: { sessionID: string; time: { created: number } },
  file: string,
): Promise<void> {
  writeFileSync(file, "")
  const deadline = Date.now() + 15_000
  while (Date.now() < deadline) {
    const listed = await client.session.messages({ path: { id: message.sessionID } })
    const stored = (listed.data ?? []).some(
      (m) =>
        m.info.role === "user" &&
        m.info.time.created > message.time.created &&
        m.parts.some((p) => p.type === "text" && p.synthetic),
    )
    if (stored) return
    await Bun.sleep(20)
  }
}

const plugin: PluginModule & { id: string } = { id: "opencode-monitor-person-race", server }
export default plugin
