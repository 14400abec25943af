import { randomBytes } from "node:crypto"
import { errorMessage } from "../../../lib/core/errors.ts"
import type { TaskResult } from "../run-context.ts"
import type { TaskRequest } from "../task-request.ts"
import { noteError, type Outcome, type Scope, type TaskSlot } from "./scope.ts"

export type TaskRun = { readonly outcome: Outcome; readonly result?: TaskResult }

/** A fresh working directory, as Concourse gives each container one under /tmp/build. */
export function buildDir(): string {
  return `/tmp/build/${randomBytes(4).toString("hex")}`
}

/**
 * Runs one task of a step through the run context: inside the scope's
 * deadline (a step timeout: the driver kills the task and it fails), aborted
 * with the scope's signal. A non-zero exit or a timeout is `failure`;
 * runnel unable to run it (no such executable, the driver down) `error`.
 */
export async function execTask(
  scope: Scope,
  slot: TaskSlot,
  request: Omit<TaskRequest, "name">,
  options: { captureStdout?: boolean; internalPath?: string } = {},
): Promise<TaskRun> {
  const { context } = scope.state.shared
  const timeoutMs = scope.deadline === undefined ? undefined : Math.max(1, scope.deadline - Date.now())
  const task: TaskRequest = { ...request, name: slot.name, ...(timeoutMs === undefined ? {} : { timeoutMs }) }
  try {
    const result = await context.runTaskAt(options.internalPath ?? slot.path, task, {
      signal: scope.signal,
      resolveSecrets: false,
      ...(options.captureStdout === true ? { captureStdout: true } : {}),
      ...(options.internalPath === undefined ? {} : { internal: true }),
    })
    return { outcome: result.code === 0 && !result.timedOut ? "success" : "failure", result }
  } catch (error) {
    if (scope.signal.aborted) return { outcome: "aborted" }
    noteError(scope, `${slot.path}: ${errorMessage(error)}`)
    return { outcome: "error" }
  }
}

/**
 * A step that could not start its task (an undefined variable, a missing
 * input, an unknown resource): the task is recorded as `error` with the
 * reason as its output, and the step errors. Aborted when the scope was.
 */
export function stepError(scope: Scope, slot: TaskSlot, error: unknown): Outcome {
  if (scope.signal.aborted) return "aborted"
  const message = errorMessage(error)
  scope.state.shared.context.recordTask(slot.path, slot.name, "error", message)
  noteError(scope, `${slot.path}: ${message}`)
  return "error"
}
