import type { FinalRunStatus, TaskStatus } from "./status.ts"

export type OutputStream = "stdout" | "stderr"

/** A task as recorded in the log store and mirrored into a Run's status, without its output. */
export type TaskRecord = {
  readonly runId: string
  /** `tasks/<n>/<name>` or `pipeline/console`. */
  readonly path: string
  readonly name: string
  readonly status: TaskStatus
  readonly code: number | null
  /** ISO 8601 */
  readonly startedAt: string | null
  readonly endedAt: string | null
}

/** How a run ended. `message` is redacted; `code` follows runExitCode(). */
export type RunResult = {
  readonly runId: string
  readonly status: FinalRunStatus
  readonly code: number
  readonly message: string | null
  /** Null for a run that ended before it started (the operator refused it: no pipeline, stopped while queued). */
  readonly startedAt: string | null
  readonly finishedAt: string
  readonly tasks: readonly TaskRecord[]
}
