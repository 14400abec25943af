import { errorMessage, SystemError } from "../../../lib/core/errors.ts"
import type { RunResult } from "../../../lib/core/run.ts"
import { parseYamlPipeline } from "../../../lib/yaml/parse.ts"
import type { YamlMap, YamlPipeline } from "../../../lib/yaml/types.ts"
import { type RunEnding, runToEnd } from "../settle.ts"
import { type JobOutcome, runJobs } from "./jobs.ts"
import { GrowingRedactor } from "./redaction.ts"
import type { RunShared } from "./scope.ts"
import type { YamlDeps, YamlRun } from "./yaml-run.ts"

export { memoryVersions } from "./versions.ts"
export type { JobLimit, MetadataField, ResourceVersions, Version, YamlDeps, YamlRun } from "./yaml-run.ts"

/**
 * Runs a Concourse-style YAML pipeline to its end and settles it exactly
 * once (runToEnd); never rejects. YAML is data, so it is interpreted here, in
 * the operator, through the same RunContext as scripts (drivers, volumes,
 * redaction, task records). Aborting `signal` stops the run: running tasks
 * are killed, on_abort and ensure hooks still run, no job starts after.
 *
 * How the run ends: `aborted` when stopped; else `error` when a job errored
 * (runnel could not do its part: an undefined variable, a missing input, no
 * such executable), even if another failed, since that is what needs fixing
 * first; else `failure` when a job failed; else `success` (skipped jobs do
 * not count). The code is runExitCode's, as for scripts: 2 for `error`. The
 * message: the first error, or the jobs that failed.
 */
export function runYamlPipeline(run: YamlRun, deps: YamlDeps, signal: AbortSignal): Promise<RunResult> {
  return runToEnd(run, deps, signal, {
    redactor: (values) => new GrowingRedactor(values),
    // A task runnel cannot run errors its step and job, not the whole run: other jobs go on.
    taskErrorEndsRun: false,
    async execute({ context, redactor, signal: runSignal }) {
      const pipeline = parsed(run)
      const sources = new Map<string, YamlMap>(pipeline.varSources.map((source) => [source.name, source.vars]))
      const shared: RunShared = {
        run,
        deps,
        pipeline,
        context,
        redactor,
        sources,
        signal: runSignal,
        jobVersions: new Map(),
      }
      // The pipeline's own max_in_flight: its runs beyond it wait here for one to end.
      const release =
        pipeline.maxInFlight === undefined ? undefined : await deps.runSlot?.(pipeline.maxInFlight, runSignal)
      try {
        return jobsEnding(await runJobs(shared))
      } finally {
        release?.()
      }
    },
  })
}

/** The pipeline, or a SystemError saying why it cannot run as written (it changed after it was checked). */
function parsed(run: YamlRun): YamlPipeline {
  try {
    return parseYamlPipeline(run.source, { source: run.pipelineName })
  } catch (error) {
    throw new SystemError(errorMessage(error), { cause: error })
  }
}

/** How a YAML run ended, from its jobs (see runYamlPipeline); runToEnd makes it `aborted` when stopped. */
function jobsEnding(jobs: readonly JobOutcome[]): RunEnding {
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
