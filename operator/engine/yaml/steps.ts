import { parseDuration } from "../../../lib/core/duration.ts"
import { errorMessage } from "../../../lib/core/errors.ts"
import type { AcrossVar, Hooks, Step, YamlValue } from "../../../lib/yaml/types.ts"
import { runGateStep } from "./gate-step.ts"
import { runLoadVarStep } from "./load-var.ts"
import { runGetStep, runPutStep } from "./resource-steps.ts"
import { lookupOf, noteError, type Outcome, type Scope } from "./scope.ts"
import { runSetPipelineStep } from "./set-pipeline.ts"
import { runTaskStep } from "./task-step.ts"
import { interpolate, interpolateText } from "./vars.ts"

/**
 * Runs a step with its modifiers and hooks, nested as Concourse nests them
 * (atc StepPrecedence): ensure( on_error( on_abort( on_failure( on_success(
 * across( attempts( timeout( step )))))))). So each attempt has its own
 * timeout, and hooks run once around all attempts and all across values.
 */
export async function runStep(step: Step, scope: Scope): Promise<Outcome> {
  return withHooks(step, scope, () => runAcross(step, scope))
}

/**
 * Hooks as Concourse's exec package runs them, each wrapping the ones before
 * (atc/exec on_success.go, on_failure.go, on_abort.go, on_error.go,
 * ensure_step.go, nested in StepPrecedence's order):
 * - on_success runs after success, and its outcome is the step's, so a
 *   failing on_success fails the step and on_failure runs next;
 * - on_failure runs after a failure, and the step still fails (errors if the
 *   hook errors, and then on_error runs);
 * - on_abort runs after an abort, on_error after an error; the outcome stays;
 * - ensure always runs, last; a failing ensure fails the step, an erroring one errors it.
 * Hooks after an abort run with a fresh signal, so a stop does not skip them.
 * A hook is a step like any other, so it may have hooks of its own.
 */
export async function withHooks(hooks: Hooks, scope: Scope, body: () => Promise<Outcome>): Promise<Outcome> {
  let outcome = await body()
  if (outcome === "success" && hooks.onSuccess !== undefined) {
    outcome = scope.signal.aborted ? "aborted" : await runStep(hooks.onSuccess, scope)
  }
  if (outcome === "failure" && hooks.onFailure !== undefined) {
    const hook = await runStep(hooks.onFailure, scope)
    outcome = hook === "error" || hook === "aborted" ? hook : "failure"
  }
  if (outcome === "aborted" && hooks.onAbort !== undefined) await runStep(hooks.onAbort, afterAbort(scope))
  if (outcome === "error" && hooks.onError !== undefined) await runStep(hooks.onError, scope)
  if (hooks.ensure !== undefined) {
    const hook = await runStep(hooks.ensure, outcome === "aborted" ? afterAbort(scope) : scope)
    if (outcome === "aborted") return outcome
    if (outcome === "error" || hook === "error") return "error"
    if (hook === "aborted") return "aborted"
    return outcome === "success" && hook === "success" ? "success" : "failure"
  }
  return outcome
}

/** The scope for hooks that run after an abort: a signal nothing aborts, no deadline. */
function afterAbort(scope: Scope): Scope {
  const { deadline: _, ...rest } = scope
  return { ...rest, signal: new AbortController().signal }
}

async function runAcross(step: Step, scope: Scope): Promise<Outcome> {
  if (step.across === undefined || step.across.length === 0) return runAttempts(step, scope)
  const lists: YamlValue[][] = []
  try {
    for (const across of step.across) lists.push(await acrossValues(across, scope))
  } catch (error) {
    noteError(scope, `${step.kind} at ${step.at.path}: ${errorMessage(error)}`)
    return "error"
  }
  return acrossLevel(step, step.across, lists, 0, scope)
}

async function acrossValues(across: AcrossVar, scope: Scope): Promise<YamlValue[]> {
  const values = await interpolate(across.values as YamlValue, lookupOf(scope), `across var "${across.var}"`)
  if (!Array.isArray(values)) {
    throw new Error(`across var "${across.var}": values must be a list, not ${JSON.stringify(values)}`)
  }
  return [...values]
}

/**
 * One across var: its values run with their own max_in_flight (1 unless
 * given; `all` at once) and fail_fast, each running the next var's values.
 * Every combination gets its own copy of the locals (with ((.:var)) set)
 * and of the artifacts, which it does not hand back: artifacts made inside
 * across stay inside, as in Concourse.
 */
async function acrossLevel(
  step: Step,
  vars: readonly AcrossVar[],
  lists: readonly YamlValue[][],
  level: number,
  scope: Scope,
): Promise<Outcome> {
  const across = vars[level]
  const values = lists[level]
  if (across === undefined || values === undefined) return runAttempts(step, scope)
  const limit = across.maxInFlight === "all" ? values.length : (across.maxInFlight ?? 1)
  return concurrently(
    values.map((value) => (child: Scope) => {
      const locals = new Map(child.locals)
      locals.set(across.var, value)
      return acrossLevel(step, vars, lists, level + 1, { ...child, locals, artifacts: new Map(child.artifacts) })
    }),
    limit,
    across.failFast,
    scope,
  )
}

/** attempts: run again after a failure or an error, each attempt with its own task numbers; not after an abort. */
async function runAttempts(step: Step, scope: Scope): Promise<Outcome> {
  const attempts = step.attempts ?? 1
  let outcome: Outcome = "success"
  for (let attempt = 1; attempt <= attempts; attempt++) {
    outcome = await runTimeout(step, scope)
    if (outcome === "success" || outcome === "aborted" || scope.signal.aborted) break
  }
  return outcome
}

/**
 * timeout: tasks inside get the time left as their own timeout (the driver
 * kills them; they fail), and a step that did not succeed by the deadline
 * fails, whatever the cause, as Concourse turns DeadlineExceeded into failure.
 */
async function runTimeout(step: Step, scope: Scope): Promise<Outcome> {
  if (step.timeout === undefined) return runCore(step, scope)
  let deadline: number
  try {
    const ms = parseDuration(await interpolateText(step.timeout, lookupOf(scope), "timeout"))
    deadline = Math.min(scope.deadline ?? Number.POSITIVE_INFINITY, Date.now() + ms)
  } catch (error) {
    noteError(scope, `${step.kind} at ${step.at.path}: ${errorMessage(error)}`)
    return "error"
  }
  const outcome = await runCore(step, { ...scope, deadline })
  if (outcome !== "success" && outcome !== "aborted" && Date.now() >= deadline) return "failure"
  return outcome
}

async function runCore(step: Step, scope: Scope): Promise<Outcome> {
  if (scope.signal.aborted) return "aborted"
  switch (step.kind) {
    case "task":
      return runTaskStep(step, scope)
    case "get":
      return runGetStep(step, scope)
    case "put":
      return runPutStep(step, scope)
    case "load_var":
      return runLoadVarStep(step, scope)
    case "set_pipeline":
      return runSetPipelineStep(step, scope)
    case "gate":
      return runGateStep(step, scope)
    case "do":
      return runSequence(step.steps, scope)
    case "try": {
      const outcome = await runStep(step.step, scope)
      return outcome === "aborted" ? "aborted" : "success"
    }
    case "in_parallel":
      return concurrently(
        step.steps.map((child) => (childScope: Scope) => runStep(child, childScope)),
        step.limit ?? step.steps.length,
        step.failFast,
        scope,
      )
  }
}

/** Steps one after another; the first that does not succeed ends the sequence with its outcome. */
export async function runSequence(steps: readonly Step[], scope: Scope): Promise<Outcome> {
  for (const step of steps) {
    const outcome = await runStep(step, scope)
    if (outcome !== "success") return outcome
  }
  return scope.signal.aborted ? "aborted" : "success"
}

/**
 * At most `limit` of `runs` at once, in order. With `failFast`, the first
 * that does not succeed interrupts the others (they end `aborted` and their
 * on_abort hooks run) and no more start. The outcome: aborted when the scope
 * was; else error if any errored, failure if any failed (or was left
 * unstarted by fail_fast), success otherwise.
 */
async function concurrently(
  runs: readonly ((scope: Scope) => Promise<Outcome>)[],
  limit: number,
  failFast: boolean,
  scope: Scope,
): Promise<Outcome> {
  const interrupt = new AbortController()
  const signal = AbortSignal.any([scope.signal, interrupt.signal])
  const child: Scope = { ...scope, signal }
  const outcomes: Outcome[] = []
  let next = 0
  const worker = async () => {
    while (next < runs.length && !signal.aborted) {
      const run = runs[next++]
      if (run === undefined) break
      const outcome = await run(child)
      outcomes.push(outcome)
      if (failFast && outcome !== "success" && !interrupt.signal.aborted) interrupt.abort(new Error("fail_fast"))
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, runs.length)) }, worker))
  if (scope.signal.aborted) return "aborted"
  if (outcomes.includes("error")) return "error"
  if (outcomes.includes("failure")) return "failure"
  if (outcomes.includes("aborted")) return interrupt.signal.aborted ? "failure" : "aborted"
  return "success"
}
