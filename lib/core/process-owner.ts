import { readFileSync } from "node:fs"
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
  } catch (error) {
    // EPERM: alive, owned by another user.
    return (error as NodeJS.ErrnoException).code === "ESRCH"
  }
  return isZombie(pid)
}

/**
 * A killed process whose parent never reaps it still answers kill(pid, 0).
 * Where init does not reap orphans (as in some containers), a crashed runner
 * stays a zombie, and its leftovers would never go.
 */
function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")
  } catch {
    return false
  }
}
