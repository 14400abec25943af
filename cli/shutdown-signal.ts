import { errorMessage } from "../lib/core/errors.ts"

/**
 * On SIGTERM or SIGINT, `shutdown(false)`: running runs may finish within the
 * grace period. A second signal calls `shutdown(true)`: abort them now.
 * Exits 0 once shut down.
 */
export function onShutdownSignal(shutdown: (now: boolean) => Promise<void>): void {
  let shuttingDown = false
  const onSignal = (signal: NodeJS.Signals) => {
    if (shuttingDown) {
      process.stderr.write(`runnel: ${signal} again: aborting the running runs now\n`)
      void shutdown(true)
      return
    }
    shuttingDown = true
    process.stderr.write(`runnel: ${signal}: shutting down; running runs may finish within --shutdown-grace\n`)
    shutdown(false).then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`runnel: shutdown failed: ${errorMessage(error)}\n`)
        process.exit(1)
      },
    )
  }
  process.on("SIGTERM", onSignal)
  process.on("SIGINT", onSignal)
}
