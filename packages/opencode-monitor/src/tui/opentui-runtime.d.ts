/** The runtime calls the TUI part imports: opencode provides both modules at run time, so neither is installed. */
declare module "@opentui/solid" {
  export type Node = unknown
  export function createElement(tag: string): Node
  export function insert(parent: Node, value: unknown): void
  export function setProp(node: Node, name: string, value: unknown): void
  export function effect(fn: () => void): void
  // biome-ignore lint/suspicious/noExplicitAny: a Solid component takes any props object
  export function createComponent<P>(component: (props: P) => any, props: P): Node
}

declare module "solid-js" {
  export function createSignal<T>(value: T): [() => T, (value: T) => void]
  export function createMemo<T>(fn: () => T): () => T
  export function Show(props: { when: unknown; children: unknown }): unknown
  export function For<T>(props: { each: readonly T[]; children: (item: T) => unknown }): unknown
}
