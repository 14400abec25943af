import { hostname } from "node:os"

/**
 * Who created a container, volume or directory: `hostname:pid`. Leftovers are
 * removed only when their owner is dead, so a process cleaning up after a
 * crash never touches what a live neighbour is using.
 */
export const processOwner = `${hostname()}:${process.pid}`

/** True only when `recorded` names a process on this host that no longer exists. */
export function ownerIsDead(recorded: string | undefined): boolean {
  if (recorded === undefined) return false
  const separator = recorded.lastIndexOf(":")
  const pid = Number(recorded.slice(separator + 1))
  if (recorded.slice(0, separator) !== hostname() || !Number.isInteger(pid) || pid <= 0) return false
  try {
    process.kill(pid, 0)
    return false
  } catch (error) {
    // EPERM: alive, owned by another user.
    return (error as NodeJS.ErrnoException).code === "ESRCH"
  }
}
