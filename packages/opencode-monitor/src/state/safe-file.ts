import { randomBytes } from "node:crypto"
import {
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  type Stats,
  statSync,
  unlinkSync,
  writeFileSync,
} from "node:fs"
import { readdir } from "node:fs/promises"
import { join } from "node:path"
import { attempt } from "../errors"
import { STATE_FOLDER_MAX_BYTES } from "./format"

// The one way into the state folder, which anything running as the user can write: no path is checked and then
// used (docs/security.md). Without /proc (macOS) a folder is not `anchored`: entries are named by path, and
// nothing is deleted but the writer's own record and temp file.

type Unsafe = { ok: false; reason: string }
export type Refused = Unsafe & { path: string }
export type SafeText = { ok: true; text: string; mtimeMs: number; ino: number }
/** `tooLarge`: a regular file of the user's, only over the bound (its own writer's file may be removed). */
export type Unreadable = Unsafe & { tooLarge?: { mtimeMs: number } }

/** What group and others may not have: `shared` (records) write; `private` (stop requests, 0700/0600) anything. */
export type Access = "shared" | "private"
const FORBIDDEN: Record<Access, number> = { shared: 0o022, private: 0o077 }

const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW

function ownershipProblem(stats: Stats, access: Access | "owner"): string | undefined {
  const self = process.getuid?.()
  if (self !== undefined && stats.uid !== self) return `owned by uid ${stats.uid}, not ${self}`
  if (access !== "owner" && (stats.mode & FORBIDDEN[access]) !== 0) {
    return `${access === "shared" ? "group- or world-writable" : "open to group or others"} (mode ${(stats.mode & 0o777).toString(8)})`
  }
  return undefined
}

function typeOf(stats: Stats): string {
  if (stats.isSymbolicLink()) return "a symbolic link"
  if (stats.isFIFO()) return "a FIFO"
  if (stats.isSocket()) return "a socket"
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return "a device"
  if (stats.isDirectory()) return "a folder"
  return "not a regular file"
}

/** A real folder of the user's, opened once. Close it once all its operations settled: its fd number gets reused. */
export class PrivateDir {
  private closed = false

  private constructor(
    /** Where it was opened: for messages only, never to reach an entry. */
    readonly path: string,
    private readonly fd: number,
    readonly anchored: boolean,
    /** The folder's own size: it grows with its entries, so a flooded folder is refused unlisted. */
    private readonly bytes: number,
  ) {}

  /** Why the folder may not be listed (it would hold the loop), when it holds too many entries. */
  overfull(): string | undefined {
    if (this.bytes <= STATE_FOLDER_MAX_BYTES) return undefined
    return `holds too many entries (a folder of ${this.bytes} bytes, bound ${STATE_FOLDER_MAX_BYTES}): remove what is not opencode-monitor's; a folder still this large once emptied can be removed whole`
  }

  /** `descriptorPaths: false` acts as on a system without /proc/self/fd (macOS), for tests. */
  static open(path: string, access: Access = "shared", descriptorPaths = true): PrivateDir | Refused {
    return PrivateDir.openAt(path, path, access, descriptorPaths)
  }

  /** Creates the folder (and parents) 0700 and opens it, narrowed to 0700; throws when it is not the user's own. */
  static ensure(path: string): PrivateDir {
    mkdirSync(path, { recursive: true, mode: 0o700 })
    return orThrow(PrivateDir.openAt(path, path, "narrow", true))
  }

  /** The entry `name` of this very folder, whatever its path names by now: Linux resolves /proc/self/fd/<fd>. */
  entry(name: string): string {
    return this.anchored ? `/proc/self/fd/${this.fd}/${name}` : join(this.path, name)
  }

  pathOf(name: string): string {
    return join(this.path, name)
  }

  subdir(name: string, access: Access = "shared"): PrivateDir | Refused {
    return PrivateDir.openAt(this.entry(name), this.pathOf(name), access, this.anchored)
  }

  ensureSubdir(name: string): PrivateDir {
    try {
      mkdirSync(this.entry(name), { mode: 0o700 })
    } catch (error) {
      if (errorCode(error) !== "EEXIST") throw error
    }
    return orThrow(PrivateDir.openAt(this.entry(name), this.pathOf(name), "narrow", this.anchored))
  }

  /** A regular file of the user's, at most `maxBytes`: O_NOFOLLOW, O_NONBLOCK (a FIFO cannot hold the open), fstat. */
  read(name: string, maxBytes: number, access: Access = "shared"): SafeText | Unreadable {
    let fd: number
    try {
      fd = openSync(this.entry(name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
    } catch (error) {
      const code = errorCode(error)
      return { ok: false, reason: code === "ELOOP" ? "is a symbolic link" : code }
    }
    try {
      const stats = fstatSync(fd)
      if (!stats.isFile()) return { ok: false, reason: `is ${typeOf(stats)}, not a regular file` }
      const problem = ownershipProblem(stats, access)
      if (problem) return { ok: false, reason: problem }
      const tooLarge = (reason: string) => ({ ok: false as const, reason, tooLarge: { mtimeMs: stats.mtimeMs } })
      if (stats.size > maxBytes) return tooLarge(`too large (${stats.size} bytes, bound ${maxBytes})`)
      // The file may grow between fstat and read: never read past the bound.
      const buffer = Buffer.alloc(maxBytes + 1)
      let length = 0
      while (length < buffer.length) {
        const n = readSync(fd, buffer, length, buffer.length - length, null)
        if (n === 0) break
        length += n
      }
      if (length > maxBytes) return tooLarge(`too large (more than ${maxBytes} bytes)`)
      return { ok: true, text: buffer.subarray(0, length).toString("utf8"), mtimeMs: stats.mtimeMs, ino: stats.ino }
    } catch (error) {
      return { ok: false, reason: errorCode(error) }
    } finally {
      closeSync(fd)
    }
  }

  /** An entry's own stats (a symlink is not followed); undefined when there is none. */
  stats(name: string): Stats | undefined {
    return attempt(() => lstatSync(this.entry(name)))
  }

  /** The modification time of a regular file of the user's with `access`, else undefined. */
  fileMtime(name: string, access: Access): number | undefined {
    const stats = this.stats(name)
    return stats?.isFile() && !ownershipProblem(stats, access) ? stats.mtimeMs : undefined
  }

  /** Deletes an entry of this very folder; false (nothing deleted) when it is not anchored or fails. */
  remove(name: string): boolean {
    return this.anchored && succeeds(() => unlinkSync(this.entry(name)))
  }

  /** Renames within this very folder (atomic: of two renames of one name exactly one succeeds); false as `remove`. */
  rename(from: string, to: string): boolean {
    return this.anchored && succeeds(() => renameSync(this.entry(from), this.entry(to)))
  }

  /** 0600, atomically: a fresh temp name opened O_EXCL|O_NOFOLLOW, renamed over `name` (a symlink, not its target). */
  write(name: string, text: string): void {
    const temp = `${name}.${randomBytes(4).toString("hex")}.tmp`
    const fd = openSync(
      this.entry(temp),
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    )
    try {
      try {
        writeFileSync(fd, text)
      } finally {
        closeSync(fd)
      }
      renameSync(this.entry(temp), this.entry(name))
    } catch (error) {
      this.removeOwn(temp)
      throw error
    }
  }

  /** Deletes a name this process made with a random part (its record, its temp file), anchored or not. */
  removeOwn(name: string): void {
    try {
      unlinkSync(this.entry(name))
    } catch (error) {
      if (errorCode(error) !== "ENOENT") throw error
    }
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    closeSync(this.fd)
  }

  private static openAt(
    at: string,
    path: string,
    access: Access | "narrow",
    descriptorPaths: boolean,
  ): PrivateDir | Refused {
    let fd: number
    try {
      fd = openSync(at, DIRECTORY_FLAGS)
    } catch (error) {
      return { ok: false, reason: openDirProblem(at, error), path }
    }
    let reason: string
    try {
      const stats = fstatSync(fd)
      const problem = ownershipProblem(stats, access === "narrow" ? "owner" : access)
      if (!problem && access === "narrow" && (stats.mode & 0o077) !== 0) fchmodSync(fd, 0o700)
      if (!problem) return new PrivateDir(path, fd, descriptorPaths && anchors(fd, stats), stats.size)
      reason = problem
    } catch (error) {
      reason = errorCode(error)
    }
    closeSync(fd)
    return { ok: false, reason, path }
  }
}

/** Lists a folder off the loop for `use`, then closes it; an overfull one is refused. */
export async function listFolder<T>(
  dir: PrivateDir | Refused,
  use: (dir: PrivateDir, names: string[]) => Promise<T>,
): Promise<{ ok: true; value: T } | Refused> {
  if (!(dir instanceof PrivateDir)) return dir
  try {
    const names = dir.overfull() ?? (await readdir(dir.entry(".")).catch(errorCode))
    if (typeof names === "string") return { ok: false, reason: names, path: dir.path }
    return { ok: true, value: await use(dir, names) }
  } finally {
    dir.close()
  }
}

/** Does `/proc/self/fd/<fd>` lead to the very folder that was opened? (Linux: yes; macOS: no /proc.) */
function anchors(fd: number, stats: Stats): boolean {
  const through = attempt(() => statSync(`/proc/self/fd/${fd}`))
  return through?.ino === stats.ino && through.dev === stats.dev
}

function openDirProblem(at: string, error: unknown): string {
  const code = errorCode(error)
  if (code !== "ELOOP" && code !== "ENOTDIR") return code
  const stats = attempt(() => lstatSync(at))
  return stats ? `is ${typeOf(stats)}, not a folder` : code
}

function succeeds(operation: () => void): boolean {
  try {
    operation()
    return true
  } catch {
    return false
  }
}

function orThrow(opened: PrivateDir | Unsafe): PrivateDir {
  if (opened instanceof PrivateDir) return opened
  throw new Error(opened.reason)
}

/** What one pass over a folder skipped, by kind with one example each: one log line per pass, not per entry. */
export class SkipTally {
  private readonly kinds = new Map<string, { count: number; example: string }>()
  count = 0

  add(kind: string, name: string, detail?: string): void {
    this.count += 1
    const seen = this.kinds.get(kind)
    if (seen) seen.count += 1
    else this.kinds.set(kind, { count: 1, example: detail ? `${name}: ${detail}` : name })
  }

  /** `2 not a stop request (e.g. stop-7-….json), 1 untrusted (e.g. x.json: is a symbolic link)`; "" when none. */
  toString(): string {
    return [...this.kinds].map(([kind, { count, example }]) => `${count} ${kind} (e.g. ${example})`).join(", ")
  }
}

export const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException)?.code ?? (error instanceof Error ? error.message : String(error))
}
