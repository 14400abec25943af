/**
 * The CPU time `work` takes in this process, in milliseconds. The guards under
 * test exist to stop runaway work (catastrophic backtracking, a hang), which
 * costs CPU; wall time would also count the time a loaded machine spends
 * running other processes, and fail for that.
 */
export function cpuMsOf(work: () => void): number {
  const before = process.cpuUsage()
  work()
  const spent = process.cpuUsage(before)
  return (spent.user + spent.system) / 1000
}
