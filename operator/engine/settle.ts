import { errorMessage, SystemError } from "../../lib/core/errors.ts"
import type { RunResult, TaskRecord } from "../../lib/core/run.ts"
import { type FinalRunStatus, runExitCode } from "../../lib/core/status.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import type { Redactor } from "../../lib/logs/redactor.ts"
import type { SecretResolver } from "../../lib/secrets/secret-resolver.ts"
import type { Driver } from "../drivers/driver.ts"
import { RunContext, type TaskResult } from "./run-context.ts"
import type { RunObserver } from "./run-observer.ts"

/** Why a run was stopped from outside; distinct from a SystemError, which ends a run as `error`. */
export class RunAborted extends Error {
  constructor(message = "the run was stopped") {
    super(message)
    this.name = "RunAborted"
  }
}

/** How a run ended, before it is settled: its status, and what to tell about it (not yet redacted). */
export type RunEnding = { readonly status: FinalRunStatus; readonly message: string | null }

/**
 * Settles a run: how it ended becomes its result. The one place a run's code
 * is chosen, by runExitCode alone, whatever ran it (a script, a YAML plan) or
 * ended it before it ran (the operator, refusing it): `error` is 2 for YAML
 * runs as for scripts. `startedAt` is null for a run that never started.
 */
export function settle(
  run: { readonly runId: string; readonly startedAt: string | null },
  ending: RunEnding,
  tasks: readonly TaskRecord[] = [],
  finishedAt = new Date().toISOString(),
): RunResult {
  return {
    runId: run.runId,
    status: ending.status,
    code: runExitCode(ending.status),
    message: ending.message,
    startedAt: run.startedAt,
    finishedAt,
    tasks,
  }
}

/** What every run takes from its host, whichever engine runs it. */
export type RunDeps = {
  readonly driver: Driver
  readonly store: LogStore
  readonly secrets: SecretResolver
  readonly observer: RunObserver
}

/** One engine's part of a run: how it redacts, what a task runnel cannot run does, and the run itself. */
export type RunBody<R extends Redactor> = {
  readonly redactor: (secretValues: readonly string[]) => R
  /**
   * Whether a task runnel cannot run (a missing secret, the driver down) ends
   * the whole run at once as `error` (scripts), or only its step and job (YAML).
   */
  readonly taskErrorEndsRun: boolean
  /** Finished tasks of an earlier attempt, when the run is resumed. */
  readonly journal?: ReadonlyMap<string, TaskResult>
  /**
   * Runs the pipeline; resolves with how it ended, or rejects: with a
   * SystemError (`error`, its message), anything else (`error`, as runnel's
   * own failure). Once `signal` aborts, the run is `aborted` (or `error`,
   * when a task runnel could not run aborted it) whatever this answers.
   */
  readonly execute: (run: { context: RunContext; redactor: R; signal: AbortSignal }) => Promise<RunEnding>
}

/**
 * Runs one run to its end and settles it exactly once; never rejects: every
 * way a run can end is a RunResult. Aborting `signal` stops the run (with
 * the RunAborted it was given, or a generic one) and kills its tasks; tasks
 * the pipeline started and left running end with it. `startedAt`: when the
 * run started, if before this call (the operator admitted or first ran it).
 */
export async function runToEnd<R extends Redactor>(
  run: { readonly runId: string; readonly startedAt?: string },
  deps: RunDeps,
  signal: AbortSignal,
  body: RunBody<R>,
): Promise<RunResult> {
  const startedAt = run.startedAt ?? new Date().toISOString()
  const controller = new AbortController()
  // The reason says who stopped the run (a Ctrl-C, spec.stop, a deletion), and becomes its message.
  const forwardAbort = () => controller.abort(signal.reason instanceof RunAborted ? signal.reason : new RunAborted())
  signal.addEventListener("abort", forwardAbort, { once: true })
  if (signal.aborted) forwardAbort()

  let redactor: Redactor = body.redactor([])
  let context: RunContext | undefined
  let outcome: PromiseSettledResult<RunEnding>
  try {
    const runRedactor = body.redactor(await deps.secrets.values())
    redactor = runRedactor
    context = new RunContext({
      runId: run.runId,
      driver: deps.driver,
      store: deps.store,
      redactor: runRedactor,
      secrets: deps.secrets,
      observer: deps.observer,
      signal: controller.signal,
      fail: body.taskErrorEndsRun ? (error) => controller.abort(error) : () => {},
      ...(body.journal === undefined ? {} : { journal: body.journal }),
    })
    const ending = await body.execute({ context, redactor: runRedactor, signal: controller.signal })
    outcome = { status: "fulfilled", value: ending }
  } catch (reason) {
    outcome = { status: "rejected", reason }
  }

  const ended = ending(outcome, controller.signal)
  // Tasks the pipeline started but did not wait for end with the run.
  controller.abort(new RunAborted("the pipeline finished before this task"))
  signal.removeEventListener("abort", forwardAbort)
  const tasks = (await context?.close(ended.status)) ?? []
  // Output that could not be stored (the log store's disk is full) makes a run that otherwise passed or failed
  // runnel's failure: what it printed is not all there to read. A stopped run stays aborted, an error keeps its own.
  const lost = deps.store.lostOutput(run.runId)
  const { status, message } =
    lost !== undefined && (ended.status === "success" || ended.status === "failure")
      ? { status: "error" as const, message: lost.message }
      : ended
  const result = settle(
    { runId: run.runId, startedAt },
    { status, message: message === null ? null : redactor.redact(message) },
    tasks,
  )
  deps.observer.runFinished(result)
  return result
}

/** How a run ended: the first reason to stop wins. */
function ending(outcome: PromiseSettledResult<RunEnding>, signal: AbortSignal): RunEnding {
  if (signal.aborted) {
    const reason: unknown = signal.reason
    if (reason instanceof SystemError) return { status: "error", message: reason.message }
    return { status: "aborted", message: errorMessage(reason) }
  }
  if (outcome.status === "fulfilled") return outcome.value
  const reason: unknown = outcome.reason
  if (reason instanceof SystemError) return { status: "error", message: reason.message }
  return { status: "error", message: `runnel failed to run the pipeline: ${errorMessage(reason)}` }
}
