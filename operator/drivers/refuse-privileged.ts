import { SystemError } from "../../lib/core/errors.ts"
import type { Driver, RunDriver } from "./driver.ts"

/**
 * The driver as it is, except that a task asking for `privileged` rejects before it starts. A
 * privileged container is root on its host (Docker) or node (Kubernetes), so it is the server's
 * choice, not a pipeline's: the composition code wraps every driver in this unless the server was
 * started with `--allow-privileged-tasks`. `allowIt` ends the message: how to allow it where the
 * driver runs.
 */
export function refusePrivileged(driver: Driver, allowIt: string): Driver {
  return {
    name: driver.name,
    removeLeftovers: () => driver.removeLeftovers(),
    close: () => driver.close(),
    async open(runId) {
      const run = await driver.open(runId)
      const guarded: RunDriver = {
        exec(task, output, signal) {
          if (task.privileged === true) {
            return Promise.reject(
              new SystemError(`task "${task.path}" asks to run privileged, which is not allowed here; ${allowIt}`),
            )
          }
          return run.exec(task, output, signal)
        },
        createVolume: (name, options) => run.createVolume(name, options),
        close: () => run.close(),
      }
      return guarded
    },
  }
}
