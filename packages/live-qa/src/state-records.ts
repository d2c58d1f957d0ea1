/**
 * The plugin's on-disk state records (kept across restarts) as the live scenarios read them: one
 * data dir shared by the servers of a restart scenario, and the records in its state folder.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { type MonitorStateEntry, parseStateFile, projectStateDir } from "../../opencode-monitor/src/state/format.ts"
import { createIsolatedDirs, type IsolatedDirs } from "./isolated-env.ts"

export interface RestartData {
  /** Handed to every server of the scenario (`startMonitorQA({ dirs })`); the caller removes them. */
  dirs: IsolatedDirs
  /** The plugin's state folder for the project. */
  stateDir: string
  /** File names in the state folder, sorted. */
  files(): string[]
  /** Every monitor entry of every readable record, with the file it is in. */
  monitors(): { file: string; monitor: MonitorStateEntry }[]
}

export function restartData(prefix: string): RestartData {
  const dirs = createIsolatedDirs(prefix)
  const stateDir = projectStateDir(dirs.project, { XDG_STATE_HOME: dirs.state })
  const files = () => (existsSync(stateDir) ? readdirSync(stateDir).sort() : [])
  return {
    dirs,
    stateDir,
    files,
    monitors() {
      return files().flatMap((file) => {
        const parsed = parseStateFile(readFileSync(join(stateDir, file), "utf8"))
        return parsed.ok ? parsed.file.monitors.map((monitor) => ({ file, monitor })) : []
      })
    },
  }
}
