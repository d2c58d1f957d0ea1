import { readFileSync } from "node:fs"
import { availableParallelism, cpus, release, totalmem, type as osType } from "node:os"

export type MachineInfo = { cpu: string; cores: number; ramGB: number; bun: string; os: string }

function cpuModel(): string {
  try {
    const match = /^model name\s*:\s*(.+)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))
    if (match?.[1]) return match[1].trim()
  } catch {
    // not Linux
  }
  return cpus()[0]?.model ?? "unknown"
}

function osName(): string {
  try {
    const match = /^PRETTY_NAME="?([^"\n]+)"?$/m.exec(readFileSync("/etc/os-release", "utf8"))
    if (match?.[1]) return `${match[1]} (${osType()} ${release()})`
  } catch {
    // no os-release
  }
  return `${osType()} ${release()}`
}

export function machineInfo(): MachineInfo {
  return {
    cpu: cpuModel(),
    cores: availableParallelism(),
    ramGB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    bun: Bun.version,
    os: osName(),
  }
}
