import type { ToolContext, ToolResult } from "@opencode-ai/plugin"
import type { z } from "zod"

/**
 * opencode's `tool()` from `@opencode-ai/plugin` is the identity function (with `tool.schema = zod`);
 * importing its value would make every install pull that package's runtime tree (≈ 65 MB), so the
 * plugin defines the same helper here and keeps only type imports from `@opencode-ai/plugin`. The
 * tools import what they use of zod themselves: a `tool.schema` holding zod's whole namespace would
 * make the bundle build all of it (every locale, every namespace) as the plugin loads.
 */
export function tool<Args extends z.ZodRawShape>(input: {
  description: string
  args: Args
  execute(args: z.infer<z.ZodObject<Args>>, context: ToolContext): Promise<ToolResult>
}) {
  return input
}
