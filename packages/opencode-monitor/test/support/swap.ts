import { renameSync, symlinkSync } from "node:fs"

/** What a racing process does: the real folder at `path` moved aside, a symlink to `target` in its place. */
export function swapForSymlink(path: string, target: string): void {
  renameSync(path, `${path}.aside`)
  symlinkSync(target, path)
}
