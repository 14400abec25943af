import { errorMessage } from "../../../lib/core/errors.ts"
import type { RunResult } from "../../../lib/core/run.ts"
import { type FinalRunStatus, runExitCode } from "../../../lib/core/status.ts"
import { parseYamlPipeline } from "../../../lib/yaml/parse.ts"
import type { YamlMap } from "../../../lib/yaml/types.ts"
import { RunAborted } from "../engine.ts"
import { RunContext } from "../run-context.ts"
import { type JobOutcome, runJobs } from "./jobs.ts"
import { GrowingRedactor } from "./redaction.ts"
import type { RunShared } from "./scope.ts"
import type { YamlDeps, YamlRun } from "./yaml-run.ts"

export { memoryVersions } from "./versions.ts"
export type { JobLimit, MetadataField, ResourceVersions, Version, YamlDeps, YamlRun } from "./yaml-run.ts"

/**
 * Runs a Concourse-style YAML pipeline to its end and settles it exactly
 * once; never rejects. YAML is data, so it is interpreted here, in the
 * operator, through the same RunContext as scripts (drivers, volumes,
 * redaction, task records). Aborting `signal` stops the run: running tasks
 * are killed, on_abort and ensure hooks still run, no job starts after.
 *
 * How the run ends: `aborted` when stopped; else `error` when a job errored
 * (runnel could not do its part: an undefined variable, a missing input, no
 * such executable), even if another failed, since that is what needs fixing
 * first; else `failure` when a job failed; else `success` (skipped jobs do
 * not count). The code is 0 on success, 1 when a job failed or errored, and
 * 130 when stopped (as runExitCode). The message: the first error, or the
 * jobs that failed.
 */
export async function runYamlPipeline(run: YamlRun, deps: YamlDeps, signal: AbortSignal): Promise<RunResult> {
  const startedAt = new Date().toISOString()
  const controller = new AbortController()
  const forwardAbort = () => controller.abort(new RunAborted())
  signal.addEventListener("abort", forwardAbort, { once: true })
  if (signal.aborted) forwardAbort()

  let redactor = new GrowingRedactor([])
  let context: RunContext | undefined
  let settled: { status: FinalRunStatus; message: string | null }
  try {
    redactor = new GrowingRedactor(await deps.secrets.values())
    const pipeline = parseYamlPipeline(run.source, { source: run.pipelineName })
    const sources = new Map<string, YamlMap>(pipeline.varSources.map((source) => [source.name, source.vars]))
    context = new RunContext({
      runId: run.runId,
      driver: deps.driver,
      store: deps.store,
      redactor,
      secrets: deps.secrets,
      observer: deps.observer,
      signal: controller.signal,
      // A task runnel cannot run errors its step and job, not the whole run: other jobs go on.
      fail: () => {},
    })
    const shared: RunShared = {
      run,
      deps,
      pipeline,
      context,
      redactor,
      sources,
      signal: controller.signal,
      jobVersions: new Map(),
    }
    // The pipeline's own max_in_flight: its runs beyond it wait here for one to end.
    const release =
      pipeline.maxInFlight === undefined ? undefined : await deps.runSlot?.(pipeline.maxInFlight, controller.signal)
    try {
      settled = settle(await runJobs(shared), controller.signal)
    } finally {
      release?.()
    }
  } catch (error) {
    settled = controller.signal.aborted
      ? { status: "aborted", message: errorMessage(controller.signal.reason) }
      : { status: "error", message: errorMessage(error) }
  }
  signal.removeEventListener("abort", forwardAbort)
  controller.abort(new RunAborted("the pipeline finished before this task"))
  const tasks = (await context?.close(settled.status)) ?? []
  const result: RunResult = {
    runId: run.runId,
    status: settled.status,
    code: settled.status === "error" ? 1 : runExitCode(settled.status),
    message: settled.message === null ? null : redactor.redact(settled.message),
    startedAt,
    finishedAt: new Date().toISOString(),
    tasks,
  }
  deps.observer.runFinished(result)
  return result
}

/** The one place that decides how a YAML run ended (see runYamlPipeline). */
function settle(jobs: readonly JobOutcome[], signal: AbortSignal): { status: FinalRunStatus; message: string | null } {
  if (signal.aborted) return { status: "aborted", message: errorMessage(signal.reason) }
  const errored = jobs.filter((job) => job.outcome === "error")
  if (errored.length > 0) return { status: "error", message: errored[0]?.message ?? "a job errored" }
  const failed = jobs.filter((job) => job.outcome === "failure" || job.outcome === "aborted")
  if (failed.length > 0) {
    return {
      status: "failure",
      message: `${failed.length === 1 ? "job" : "jobs"} ${failed.map((job) => `"${job.job}"`).join(", ")} failed`,
    }
  }
  return { status: "success", message: null }
}
