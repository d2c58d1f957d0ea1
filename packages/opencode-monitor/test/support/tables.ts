import { createProcessTable, type ProcessTable } from "../../src/process/process-table"

/**
 * Both back ends of the process table, for the real-process suites to run twice: /proc (Linux) and
 * ps (what a system without /proc uses), forced through the constructor, on this Linux machine.
 */
export const BACK_ENDS: [string, ProcessTable][] = [
  ["/proc", createProcessTable("proc")],
  ["ps", createProcessTable("ps")],
]
