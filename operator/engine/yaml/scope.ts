import type { TaskStatus } from "../../../lib/core/status.ts"
import type { Job, YamlPipeline, YamlValue } from "../../../lib/yaml/types.ts"
import type { RunContext } from "../run-context.ts"
import type { GrowingRedactor } from "./redaction.ts"
import type { TaskImage } from "./registry-image.ts"
import { substituteLocals, type VarLookup } from "./vars.ts"
import type { Version, YamlDeps, YamlRun } from "./yaml-run.ts"

/** How a step, a hook or a job ended, in Concourse's terms: failed, errored or aborted (stopped or interrupted). */
export type Outcome = "success" | "failure" | "error" | "aborted"

/** What the whole run shares: one per runYamlPipeline call. */
export type RunShared = {
  readonly run: YamlRun
  readonly deps: YamlDeps
  readonly pipeline: YamlPipeline
  readonly context: RunContext
  readonly redactor: GrowingRedactor
  readonly sources: VarLookup["sources"]
  /** Aborted when the run is stopped. */
  readonly signal: AbortSignal
  /** Versions each job fetched or put in this run, by job then resource: what `passed:` picks. */
  readonly jobVersions: Map<string, Map<string, Version>>
}

/** An artifact of a job execution: a run volume, and the image it holds when a get fetched one. */
export type Artifact = { readonly volume: string; readonly image?: TaskImage }

/** One job execution: its task numbering and first error message. */
export type JobState = {
  readonly shared: RunShared
  readonly job: Job
  taskCount: number
  errorMessage?: string
}

/**
 * Where a step runs. Artifacts and locals are shared with the steps after it
 * (in_parallel children share them too); across iterations get copies.
 */
export type Scope = {
  readonly state: JobState
  readonly artifacts: Map<string, Artifact>
  readonly locals: Map<string, YamlValue>
  /** Aborted on stop, or when a fail_fast sibling failed; hooks after an abort get a fresh one. */
  readonly signal: AbortSignal
  /** Epoch ms by which tasks must end: the nearest enclosing timeout. */
  readonly deadline?: number
}

export function lookupOf(scope: Scope): VarLookup {
  const { shared } = scope.state
  return {
    secrets: shared.deps.secrets,
    redactor: shared.redactor,
    sources: shared.sources,
    locals: scope.locals,
  }
}

/** A task of the job: its path and where its new artifacts' volumes go. */
export type TaskSlot = { readonly path: string; readonly n: number; readonly name: string }

/**
 * Takes the next task number of the job (n counts task executions from 1 in
 * start order). The path and the task's name show the step's name with its across and load_var
 * values written in, so each value of an across has a name of its own;
 * unless that would show a value the run redacts (a load_var without reveal).
 */
export function nextTask(scope: Scope, kind: string, name: string): TaskSlot {
  const n = ++scope.state.taskCount
  const filled = substituteLocals(name, scope.locals)
  const shown = scope.state.shared.redactor.redact(filled) === filled ? filled : name
  return { path: `jobs/${scope.state.job.name}/${n}/${kind}/${shown}`, n, name: shown }
}

/** A new run volume for an artifact a task makes; unique per task execution, so jobs and iterations never share one. */
export function artifactVolume(scope: Scope, slot: TaskSlot, artifact: string): string {
  return `${scope.state.job.name}/${slot.n}/${artifact}`
}

/** The path of the one task a job skipped as a whole has. */
export function skippedJobPath(job: string): string {
  return `jobs/${job}/0/job/${job}`
}

/** Remembers the first error of the job, for the run's message. */
export function noteError(scope: Scope, message: string): void {
  scope.state.errorMessage ??= message
}

export function outcomeOfTask(status: TaskStatus): Outcome {
  if (status === "success" || status === "failure" || status === "error" || status === "aborted") return status
  return "success"
}
