import { errorMessage } from "../../../lib/core/errors.ts"
import type { Job, Step } from "../../../lib/yaml/types.ts"
import { lowerCaseHeaders } from "../engine.ts"
import { webhookTrigger } from "../webhook-trigger.ts"
import { type JobState, noteError, type Outcome, type RunShared, type Scope, skippedJobPath } from "./scope.ts"
import { runSequence, withHooks } from "./steps.ts"

export type JobOutcome = {
  readonly job: string
  readonly outcome: Outcome | "skipped"
  readonly message?: string
  /** Why a skipped job was skipped: its webhook_trigger was false, or a job it waits for did not succeed (or a cycle). */
  readonly skippedBy?: "webhook_trigger" | "passed"
}

/**
 * Runs the jobs of one run. A job waits for the jobs its gets name in
 * `passed:` (those in this run) and starts when they have all succeeded or
 * were skipped by their `webhook_trigger` (interface.md, "Conditional
 * execution": downstream jobs still proceed, taking the resource's latest
 * version since the skipped job passed none); if one failed, errored, was
 * stopped or was skipped because of its own upstream, it is skipped with the
 * reason, and so are the jobs after it.
 * Independent jobs run at once, and a failing job stops no unrelated one.
 * Jobs whose `passed:` form a cycle are skipped. After a stop, no job starts.
 */
export async function runJobs(shared: RunShared): Promise<JobOutcome[]> {
  const { pipeline, run } = shared
  const selected = run.jobs === undefined ? pipeline.jobs : pipeline.jobs.filter((job) => run.jobs?.includes(job.name))
  const names = new Set(selected.map((job) => job.name))
  const upstream = new Map(selected.map((job) => [job.name, [...passedJobs(job)].filter((name) => names.has(name))]))
  const cyclic = inCycles(upstream)
  const results = new Map<string, Promise<JobOutcome>>()
  // Evaluated on webhook runs only: a manual or scheduled run starts every job.
  const triggerNotes: string[] = []
  const trigger =
    run.triggeredBy === "webhook" && run.webhook !== undefined
      ? webhookTrigger(lowerCaseHeaders(run.webhook), (line) => triggerNotes.push(line))
      : undefined

  const start = (job: Job): Promise<JobOutcome> => {
    let result = results.get(job.name)
    if (result !== undefined) return result
    result = (async (): Promise<JobOutcome> => {
      if (cyclic.has(job.name)) {
        return skip(shared, job, `skipped: the passed: constraints of job "${job.name}" form a cycle`, "passed")
      }
      const before: JobOutcome[] = []
      for (const name of upstream.get(job.name) ?? []) {
        const other = selected.find((candidate) => candidate.name === name)
        if (other !== undefined) before.push(await start(other))
      }
      const blocked = before.find((other) => other.outcome !== "success" && other.skippedBy !== "webhook_trigger")
      if (blocked !== undefined) {
        const how =
          blocked.outcome === "skipped"
            ? "was skipped"
            : blocked.outcome === "failure"
              ? "failed"
              : `ended ${blocked.outcome}`
        return skip(shared, job, `skipped: job "${blocked.job}" ${how} in this run (passed:)`, "passed")
      }
      if (shared.signal.aborted) return { job: job.name, outcome: "aborted" }
      if (trigger !== undefined && job.webhookTrigger !== undefined) {
        triggerNotes.length = 0
        if (!trigger(job.webhookTrigger)) {
          const notes = triggerNotes.length === 0 ? "" : `\n${triggerNotes.join("\n")}`
          const reason = `skipped: webhook_trigger ${JSON.stringify(job.webhookTrigger)} is false${notes}`
          return skip(shared, job, reason, "webhook_trigger")
        }
      }
      return runJob(shared, job)
    })()
    results.set(job.name, result)
    return result
  }
  return Promise.all(selected.map(start))
}

function skip(
  shared: RunShared,
  job: Job,
  reason: string,
  skippedBy: NonNullable<JobOutcome["skippedBy"]>,
): JobOutcome {
  shared.context.recordTask(skippedJobPath(job.name), job.name, "skipped", reason)
  return { job: job.name, outcome: "skipped", message: reason, skippedBy }
}

/** One job: its slot across runs, then its plan as a `do` with the job's hooks. */
async function runJob(shared: RunShared, job: Job): Promise<JobOutcome> {
  const state: JobState = { shared, job, taskCount: 0 }
  let release: (() => void) | undefined
  if (shared.deps.jobSlot !== undefined) {
    try {
      release = await shared.deps.jobSlot(
        job.name,
        {
          serial: job.serial,
          serialGroups: job.serialGroups,
          ...(job.maxInFlight === undefined ? {} : { maxInFlight: job.maxInFlight }),
        },
        shared.signal,
      )
    } catch (error) {
      if (shared.signal.aborted) return { job: job.name, outcome: "aborted" }
      return { job: job.name, outcome: "error", message: `job "${job.name}": ${errorMessage(error)}` }
    }
  }
  try {
    const scope: Scope = { state, artifacts: new Map(), locals: new Map(), signal: shared.signal }
    let outcome: Outcome
    try {
      outcome = await withHooks(job, scope, () => runSequence(job.plan, scope))
    } catch (error) {
      // A bug of runnel's, not the pipeline's: the job errors, the others go on.
      noteError(scope, `runnel failed to run job "${job.name}": ${errorMessage(error)}`)
      outcome = "error"
    }
    return {
      job: job.name,
      outcome,
      ...(outcome === "error" ? { message: state.errorMessage ?? `job "${job.name}" errored` } : {}),
    }
  } finally {
    release?.()
  }
}

/** The jobs named in `passed:` anywhere in the job's plan and hooks. */
export function passedJobs(job: Job): Set<string> {
  const found = new Set<string>()
  const visit = (step: Step | undefined): void => {
    if (step === undefined) return
    if (step.kind === "get") for (const name of step.passed) found.add(name)
    if (step.kind === "do" || step.kind === "in_parallel") step.steps.forEach(visit)
    if (step.kind === "try") visit(step.step)
    for (const hook of [step.onSuccess, step.onFailure, step.onError, step.onAbort, step.ensure]) visit(hook)
  }
  job.plan.forEach(visit)
  for (const hook of [job.onSuccess, job.onFailure, job.onError, job.onAbort, job.ensure]) visit(hook)
  found.delete(job.name)
  return found
}

/** Jobs on a cycle of `passed:` (or waiting on one). */
function inCycles(upstream: ReadonlyMap<string, readonly string[]>): Set<string> {
  const state = new Map<string, "visiting" | "done">()
  const cyclic = new Set<string>()
  const visit = (name: string): boolean => {
    const seen = state.get(name)
    if (seen === "visiting") return true
    if (seen === "done") return cyclic.has(name)
    state.set(name, "visiting")
    let bad = false
    for (const other of upstream.get(name) ?? []) if (visit(other)) bad = true
    state.set(name, "done")
    if (bad) cyclic.add(name)
    return bad
  }
  for (const name of upstream.keys()) visit(name)
  return cyclic
}
