import { readFileSync } from "node:fs"
import { readdir, readFile } from "node:fs/promises"

/**
 * A native task's process group as it outlives the runnel process that started it: when runnel is
 * killed (SIGKILL, OOM), nothing kills its tasks, and a resumed run would start its task again
 * beside the old one. So each task's group is written down when it starts (groupRecord) and a later
 * start kills what is still running of it (killRecordedGroup) before any run resumes.
 *
 * A pid alone could name another process by then, since pids are recycled. The record adds the
 * leader's start time (clock ticks since boot, /proc/<pid>/stat) and the boot's id: a leader that
 * is alive with another start time, or a record from another boot, is not the task's.
 */

/** `<boot id> <start time>` of live process `pid`; read while the process cannot have been reaped yet. */
export function groupRecord(pid: number): string {
  return `${bootId()} ${startTime(readFileSync(`/proc/${pid}/stat`, "utf8"))}`
}

/**
 * SIGKILLs group `pgid` if it is still the one `record` describes, and resolves once none of its
 * processes runs (a zombie nobody reaps has already died), or after `timeoutMs` with false.
 */
export async function killRecordedGroup(pgid: number, record: string, timeoutMs = 10_000): Promise<boolean> {
  const [boot, started] = record.trim().split(" ")
  if (boot !== bootId()) return true
  const leader = await readFile(`/proc/${pgid}/stat`, "utf8").catch(() => undefined)
  // The leader may have ended and left the rest of its group: its pid stays taken while the group
  // lives, so a group without a leader is still the task's.
  if (leader !== undefined && String(startTime(leader)) !== started) return true
  try {
    process.kill(-pgid, "SIGKILL")
  } catch {
    return true // ESRCH: nothing of the group is left
  }
  const deadline = performance.now() + timeoutMs
  while (await groupRuns(pgid)) {
    if (performance.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return true
}

/** Whether any process of group `pgid` is alive (not a zombie). */
async function groupRuns(pgid: number): Promise<boolean> {
  const pids = (await readdir("/proc")).filter((name) => /^\d+$/.test(name))
  for (const pid of pids) {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined)
    if (stat === undefined) continue
    const fields = afterName(stat)
    // Fields after the name: state, ppid, pgrp.
    if (fields[2] === String(pgid) && fields[0] !== "Z") return true
  }
  return false
}

/** The fields of a stat line after `(name)`, which may itself hold spaces and parentheses. */
function afterName(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")
}

/** Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot. */
function startTime(stat: string): number {
  return Number(afterName(stat)[19])
}

let boot: string | undefined
function bootId(): string {
  boot ??= readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()
  return boot
}
