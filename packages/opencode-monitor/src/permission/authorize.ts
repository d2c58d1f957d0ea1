import { join } from "node:path"
import type { ToolContext } from "@opencode-ai/plugin"
import type { MonitorConfig } from "../config"
import { MonitorError } from "../errors"
import { askReturned, missingApiMessage } from "../host-check"
import type { SimpleCommand } from "./bash-parser"
import { permissionQuestions } from "./questions"

/** The command, its simple commands (parsed once, by the start request) and its label. */
export type AuthorizeRequest = { command: string; commands: readonly SimpleCommand[]; label: string }

/**
 * The user's rules decide as for opencode's bash tool: `external_directory` for paths outside the project, then
 * `bash`, one pattern per simple command. Without `ask`, only allowed_commands run, judged per simple command.
 */
export async function authorizeCommand(
  request: AuthorizeRequest,
  ctx: ToolContext,
  config: MonitorConfig,
): Promise<void> {
  const { command, label } = request
  const questions = await permissionQuestions(request.commands, { directory: ctx.directory, worktree: ctx.worktree })
  if (typeof ctx.ask !== "function") return checkAllowedCommands(questions.programs, config)
  if (questions.externalDirectories.length > 0) {
    // Each directory with `/*`, as the bash tool asks them.
    const patterns = questions.externalDirectories.map((dir) => join(dir, "*"))
    await ask(ctx, {
      permission: "external_directory",
      patterns,
      always: patterns,
      metadata: { command, label, directories: questions.externalDirectories, patterns },
    })
  }
  // Like the bash tool: a command of only `cd`s (or only comments) asks no bash pattern.
  if (questions.patterns.length === 0) return
  await ask(ctx, {
    permission: "bash",
    patterns: questions.patterns,
    always: questions.always,
    metadata: { command, label, description: `opencode-monitor: run in the background as "${label}"` },
  })
}

/** `ctx.ask`, refusing to run when this opencode's answer is not a promise: then nothing was asked. */
async function ask(ctx: ToolContext, input: Parameters<ToolContext["ask"]>[0]): Promise<void> {
  const answer: unknown = ctx.ask(input)
  if (!askReturned(answer)) {
    throw new MonitorError("permission_denied", missingApiMessage("server", ["ctx.ask answering with a promise"]))
  }
  await answer
}

function checkAllowedCommands(programs: readonly string[], config: MonitorConfig): void {
  const refused = [...new Set(programs.filter((program) => !config.allowed_commands.includes(program)))]
  if (programs.length > 0 && refused.length === 0) return
  const what =
    refused.length > 0
      ? `${refused.map((p) => JSON.stringify(p)).join(", ")} ${refused.length === 1 ? "is" : "are"} not in allowed_commands`
      : "the command runs no program allowed_commands could list"
  throw new MonitorError(
    "permission_denied",
    `Permission denied: this opencode cannot ask the user, and ${what} (every program of a compound command must be listed). ` +
      "Ask the user to add the program names to the opencode-monitor allowed_commands option.",
  )
}
