import { type InjectorOptions, MonitorOutputInjector } from "../../src/delivery/injector"
import { FakeScheduler } from "./fake-scheduler"
import { FakeSessionApi, settle } from "./fake-session-api"

/** A MonitorOutputInjector on a fake clock and a fake opencode, with the plugin's default timings. */
export function setupInjector(options: Partial<InjectorOptions> = {}) {
  const scheduler = new FakeScheduler()
  const api = new FakeSessionApi(() => scheduler.now())
  scheduler.advance(1_000_000) // message times far from zero
  const gaveUp: string[] = []
  const injector = new MonitorOutputInjector(
    {
      userMessageWindowMs: 2_000,
      pendingRetryMs: 1_000,
      postDispatchHoldMs: 250,
      acceptedMessageSkewMs: 5_000,
      pendingMaxLines: 100,
      pendingMaxBytes: 32_768,
      ...options,
    },
    { api, scheduler, onGiveUp: (d) => gaveUp.push(d.key) },
  )
  const advance = async (ms: number) => {
    // Step in small slices so async sends settle between timer firings, as on a real loop.
    for (let t = 0; t < ms; t += 50) {
      scheduler.advance(Math.min(50, ms - t))
      await settle()
    }
  }
  return { scheduler, api, injector, advance, gaveUp }
}
