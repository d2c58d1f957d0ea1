/** Public surface of the live QA harness. */
export * from "./opencode-server.ts"
export { type GroupProcess, groupLeftovers, type KillReport, type PsEntry, psAll } from "./process-group.ts"
export * from "./scripted-model.ts"
export * from "./timeline.ts"
