import type { ToolContext, ToolResult } from "@opencode-ai/plugin"
import type { z } from "zod"

// opencode's `tool()` is the identity; importing its value pulls `@opencode-ai/plugin`'s runtime tree (≈ 65 MB) into
// every install, and `tool.schema` would load all of zod.
export function tool<Args extends z.ZodRawShape>(input: {
  description: string
  args: Args
  execute(args: z.infer<z.ZodObject<Args>>, context: ToolContext): Promise<ToolResult>
}) {
  return input
}
