import { randomBytes } from "node:crypto"
import {
  chmodSync,
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  rmSync,
  type Stats,
  writeSync,
} from "node:fs"

/**
 * The one way into the state folder (SPEC §12, turn 3). Anything that runs as the user can write
 * there, so a folder or file is used only when it is the user's own, not group- or world-writable,
 * of the right type (a real folder, a regular file: never a symlink, FIFO or device), and a file
 * is read without blocking and within a size bound. What fails is skipped, never followed.
 */

export type Unsafe = { ok: false; reason: string }
export type SafeText = { ok: true; text: string; mtimeMs: number; ino: number }
/** `tooLarge`: a regular file of the user's, only over the bound (its own writer's file may be removed). */
export type Unreadable = Unsafe & { tooLarge?: { mtimeMs: number } }
export type SafeNames = { ok: true; names: string[] }

const uid = () => process.getuid?.()

/**
 * Which mode bits a trusted entry must not have: `shared` = no write for group or others (the state
 * records); `private` = nothing for group or others (0700 folders, 0600 files: the TUI's stop requests).
 */
export type Access = "shared" | "private"
const FORBIDDEN: Record<Access, number> = { shared: 0o022, private: 0o077 }

/** Why `stats` may not be trusted as the user's own, or undefined when it may. */
function ownershipProblem(stats: Stats, access: Access): string | undefined {
  const self = uid()
  if (self !== undefined && stats.uid !== self) return `owned by uid ${stats.uid}, not ${self}`
  if ((stats.mode & FORBIDDEN[access]) !== 0) {
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

/** The folder is a real folder (not a symlink to one) of the user's, not writable by others. */
export function checkPrivateDir(dir: string, access: Access = "shared"): { ok: true } | Unsafe {
  let stats: Stats
  try {
    stats = lstatSync(dir)
  } catch (error) {
    return { ok: false, reason: errorCode(error) }
  }
  if (!stats.isDirectory()) return { ok: false, reason: `is ${typeOf(stats)}, not a folder` }
  const problem = ownershipProblem(stats, access)
  return problem ? { ok: false, reason: problem } : { ok: true }
}

/** The names in a folder that passed `checkPrivateDir`. */
export function listPrivateDir(dir: string, access: Access = "shared"): SafeNames | Unsafe {
  const check = checkPrivateDir(dir, access)
  if (!check.ok) return check
  try {
    return { ok: true, names: readdirSync(dir) }
  } catch (error) {
    return { ok: false, reason: errorCode(error) }
  }
}

/**
 * Reads a regular file of the user's, at most `maxBytes`: opened with O_NOFOLLOW (a symlink fails)
 * and O_NONBLOCK (a FIFO cannot hold the open), then checked on the open descriptor.
 */
export function readPrivateFile(path: string, maxBytes: number, access: Access = "shared"): SafeText | Unreadable {
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch (error) {
    const code = errorCode(error)
    return { ok: false, reason: code === "ELOOP" ? "is a symbolic link" : code }
  }
  try {
    const stats = fstatSync(fd)
    if (!stats.isFile()) return { ok: false, reason: `is ${typeOf(stats)}, not a regular file` }
    const problem = ownershipProblem(stats, access)
    if (problem) return { ok: false, reason: problem }
    if (stats.size > maxBytes) {
      return {
        ok: false,
        reason: `too large (${stats.size} bytes, bound ${maxBytes})`,
        tooLarge: { mtimeMs: stats.mtimeMs },
      }
    }
    // The file may grow between fstat and read: never read past the bound.
    const buffer = Buffer.alloc(maxBytes + 1)
    let length = 0
    while (length < buffer.length) {
      const n = readSync(fd, buffer, length, buffer.length - length, null)
      if (n === 0) break
      length += n
    }
    if (length > maxBytes) {
      return { ok: false, reason: `too large (more than ${maxBytes} bytes)`, tooLarge: { mtimeMs: stats.mtimeMs } }
    }
    return { ok: true, text: buffer.subarray(0, length).toString("utf8"), mtimeMs: stats.mtimeMs, ino: stats.ino }
  } catch (error) {
    return { ok: false, reason: errorCode(error) }
  } finally {
    closeSync(fd)
  }
}

/** The modification time of a regular file of the user's (lstat: a symlink is not one), else undefined. */
export function ownFileMtime(path: string): number | undefined {
  try {
    const stats = lstatSync(path)
    const self = uid()
    return stats.isFile() && (self === undefined || stats.uid === self) ? stats.mtimeMs : undefined
  } catch {
    return undefined
  }
}

/** The inode a path names now, without following a symlink (to check a rename took the file that was read). */
export function inodeOf(path: string): number | undefined {
  try {
    return lstatSync(path).ino
  } catch {
    return undefined
  }
}

/**
 * Creates the folder (and missing parents) 0700; a folder of the user's that others may write is
 * narrowed to 0700. Throws when it is not the user's own real folder.
 */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const stats = lstatSync(dir)
  if (!stats.isDirectory()) throw new Error(`${dir} is ${typeOf(stats)}, not a folder`)
  const self = uid()
  if (self !== undefined && stats.uid !== self) throw new Error(`${dir} is owned by uid ${stats.uid}, not ${self}`)
  if ((stats.mode & 0o077) !== 0) chmodSync(dir, 0o700)
}

/**
 * Writes a file 0600 atomically: a fresh temp name opened with O_EXCL|O_NOFOLLOW (a planted file or
 * symlink there makes the open fail, never a write through it), then renamed over `path` (a
 * rename replaces a symlink at `path` itself, never its target).
 */
export function writePrivateFile(path: string, text: string): void {
  const temp = `${path}.${randomBytes(4).toString("hex")}.tmp`
  const fd = openSync(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
  try {
    const bytes = Buffer.from(text)
    let at = 0
    while (at < bytes.length) at += writeSync(fd, bytes, at, bytes.length - at)
  } catch (error) {
    closeSync(fd)
    rmSync(temp, { force: true })
    throw error
  }
  closeSync(fd)
  try {
    renameSync(temp, path)
  } catch (error) {
    rmSync(temp, { force: true }) // our own temp file, created above
    throw error
  }
}

/**
 * "Skipped with one log line": remembers what it already reported (a file is looked at every scan),
 * bounded so a folder full of junk cannot grow it without end.
 */
export class SkipLog {
  private readonly seen = new Set<string>()

  constructor(
    private readonly log: (message: string, extra: Record<string, unknown>) => void,
    private readonly max = 256,
  ) {}

  skip(path: string, reason: string): void {
    const key = `${path}\0${reason}`
    if (this.seen.has(key)) return
    if (this.seen.size >= this.max) this.seen.clear()
    this.seen.add(key)
    this.log("skipping an untrusted entry in the monitor state folder", { path, reason })
  }
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException)?.code ?? (error instanceof Error ? error.message : String(error))
}
