import type { MonitorInfo } from "../../src/manager"
import type { OutputBatch } from "../../src/pipeline/batcher"
import { textsOf } from "./lines"

/** Collects what a MonitorManager hands to delivery, and resolves when a monitor has ended. */
export class BatchCollector {
  readonly batches: OutputBatch[] = []
  private readonly ended = new Map<string, (info: MonitorInfo) => void>()
  private readonly endedInfo = new Map<string, MonitorInfo>()

  onBatch = (batch: OutputBatch) => {
    this.batches.push(batch)
  }

  onEnded = (info: MonitorInfo) => {
    this.endedInfo.set(info.id, info)
    this.ended.get(info.id)?.(info)
  }

  whenEnded(id: string): Promise<MonitorInfo> {
    const done = this.endedInfo.get(id)
    if (done) return Promise.resolve(done)
    return new Promise((resolve) => this.ended.set(id, resolve))
  }

  of(id: string): OutputBatch[] {
    return this.batches.filter((b) => b.monitorId === id)
  }

  linesOf(id: string): string[] {
    return this.of(id).flatMap((b) => textsOf(b.lines))
  }
}
