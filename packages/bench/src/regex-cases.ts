/** Inputs for the backtracking contrast, shared by the parent and the child that runs RegExp. */
export type ContrastKind = "nested-optional" | "overlapping-classes"

export function contrastCase(kind: string, n: number): { pattern: string; input: string; describe: string } {
  switch (kind) {
    case "nested-optional":
      return { pattern: `^(a?){${n}}a{${n}}$`, input: "a".repeat(n), describe: `${n} a's` }
    case "overlapping-classes":
      return { pattern: "(\\w|\\d)+$", input: `${"1".repeat(n)}!`, describe: `${n} digits + "!"` }
    default:
      throw new Error(`unknown contrast kind ${JSON.stringify(kind)}`)
  }
}
