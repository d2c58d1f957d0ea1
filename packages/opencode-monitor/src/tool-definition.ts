import type { ToolContext, ToolResult } from "@opencode-ai/plugin"
import type { z } from "zod"

/**
 * opencode's `tool()` is the identity function; importing its value would make every install pull
 * `@opencode-ai/plugin`'s runtime tree (≈ 65 MB). No `tool.schema`: all of zod would load with it.
 */
export function tool<Args extends z.ZodRawShape>(input: {
  description: string
  args: Args
  execute(args: z.infer<z.ZodObject<Args>>, context: ToolContext): Promise<ToolResult>
}) {
  return input
}
