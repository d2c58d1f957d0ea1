/**
 * Pick a free TCP port on 127.0.0.1. `opencode serve --port 0` tries 4096
 * first, which would make parallel test servers collide, so we choose ourselves.
 */
import { createServer } from "node:net"

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      // Released before the caller binds it; the race window is tiny and acceptable in tests.
      server.close(() => (port > 0 ? resolve(port) : reject(new Error("could not read a free port"))))
    })
  })
}
