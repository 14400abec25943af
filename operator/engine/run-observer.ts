import type { OutputStream, RunResult, TaskRecord } from "../../lib/core/run.ts"

/**
 * How the engine reports a run as it goes: the operator mirrors it into the
 * Run's status, `runnel runner` into the terminal. Output arrives redacted.
 * Calls are synchronous and must be cheap: they sit on the output path.
 */
export interface RunObserver {
  taskStarted(task: TaskRecord): void
  output(path: string, stream: OutputStream, text: string): void
  taskFinished(task: TaskRecord): void
  runFinished(result: RunResult): void
}
