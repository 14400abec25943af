/** Statuses and their exit codes, as contract.md section 4 names them. */
export const runStatuses = ["queued", "running", "success", "failure", "error", "aborted"] as const
export type RunStatus = (typeof runStatuses)[number]

export const taskStatuses = ["pending", "running", "success", "failure", "error", "skipped", "aborted"] as const
export type TaskStatus = (typeof taskStatuses)[number]

export type FinalRunStatus = Extract<RunStatus, "success" | "failure" | "error" | "aborted">

const finalRunStatuses: ReadonlySet<string> = new Set<FinalRunStatus>(["success", "failure", "error", "aborted"])

/** Whether a run in `status` has ended (a Run without a phase yet is queued, not final). */
export const isFinalRunStatus = (status: string | undefined): status is FinalRunStatus =>
  finalRunStatuses.has(status ?? "")

/**
 * The code a finished run reports (and `runnel runner` exits with): 0 on
 * success, 1 when the pipeline failed, 2 when runnel could not run it, 130
 * when it was stopped, as a shell reports an interrupted command.
 */
export function runExitCode(status: FinalRunStatus): number {
  switch (status) {
    case "success":
      return 0
    case "failure":
      return 1
    case "error":
      return 2
    case "aborted":
      return 130
  }
}
