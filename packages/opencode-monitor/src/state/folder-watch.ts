import { type FSWatcher, watch } from "node:fs"
import { attempt } from "../errors"
import { realScheduler, type Scheduler, type TimerHandle } from "../scheduler"

/**
 * Runs `pass` on fs.watch events once the folder exists, and on a poll that finds it when it appears.
 * One pass at a time, at most one queued, each `gapMs` after the last ended (a burst costs one pass). Creates nothing.
 */
export class FolderWatch {
  private fsWatcher: FSWatcher | undefined
  private pollTimer: TimerHandle | undefined
  private queued: TimerHandle | undefined
  private running = false
  private again = false
  private closed = false
  private quietUntil = Number.NEGATIVE_INFINITY

  constructor(
    private readonly folder: string,
    private readonly pass: () => Promise<unknown>,
    private readonly pollMs: number,
    private readonly scheduler: Scheduler = realScheduler,
    private readonly gapMs = 0,
  ) {
    this.poll()
  }

  private poll = (): void => {
    this.pollTimer = this.scheduler.setTimeout(this.poll, this.pollMs)
    this.request()
  }

  private request = (): void => {
    if (this.closed || this.queued) return
    if (this.running) {
      this.again = true
      return
    }
    const wait = this.quietUntil - this.scheduler.now()
    if (wait > 0) {
      this.queued = this.scheduler.setTimeout(() => {
        this.queued = undefined
        this.request()
      }, wait)
    } else this.run()
  }

  private run(): void {
    this.running = true
    this.watchFolder()
    void this.pass()
      .catch(() => {})
      .finally(() => {
        this.running = false
        this.quietUntil = this.scheduler.now() + this.gapMs
        if (this.again) {
          this.again = false
          this.request()
        }
      })
  }

  private watchFolder(): void {
    if (this.fsWatcher) return
    // Not there yet (watch throws): the poll looks again.
    this.fsWatcher = attempt(() => watch(this.folder, this.request))
    this.fsWatcher?.on("error", () => {
      this.fsWatcher?.close()
      this.fsWatcher = undefined
    })
  }

  close(): void {
    this.closed = true
    if (this.pollTimer) this.scheduler.clearTimeout(this.pollTimer)
    if (this.queued) this.scheduler.clearTimeout(this.queued)
    this.fsWatcher?.close()
  }
}
