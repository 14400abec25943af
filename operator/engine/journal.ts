import type { LogStore } from "../../lib/logs/log-store.ts"
import { withDroppedNote } from "../../lib/logs/task-log.ts"
import { keptOutputChars, type TaskResult } from "./run-context.ts"

/**
 * The finished tasks of a run as recorded in the log store, for resuming it:
 * a task that ended with an exit code (success or failure) returns its
 * recorded result when the replayed script reaches it again. Tasks that were
 * running, aborted or errored run again.
 */
export function journalFromStore(store: LogStore, runId: string): Map<string, TaskResult> {
  const journal = new Map<string, TaskResult>()
  for (const task of store.tasks(runId)) {
    if (task.status !== "success" && task.status !== "failure") continue
    if (task.code === null || task.startedAt === null || task.endedAt === null) continue
    journal.set(task.path, {
      code: task.code,
      stdout: tail(store.output(runId, task.path, "stdout")),
      stderr: tail(store.output(runId, task.path, "stderr")),
      startedAt: task.startedAt,
      endedAt: task.endedAt,
      timedOut: false,
    })
  }
  return journal
}

function tail(text: string): string {
  if (text.length <= keptOutputChars) return text
  return withDroppedNote(text.length - keptOutputChars, text.slice(text.length - keptOutputChars))
}
