import type { RunResult } from "../../lib/core/run.ts"
import type { ContentType } from "../../lib/script/content-type.ts"
import { runScript, type ScriptRun } from "./engine.ts"
import { runYamlPipeline, type YamlDeps, type YamlRun } from "./yaml/interpret.ts"

/** A run of either kind: each engine reads what it knows (a script its filename and journal, YAML its jobs). */
type PipelineRun = ScriptRun & YamlRun

/** Runs one pipeline run to its end and settles it; never rejects (runScript, runYamlPipeline). */
export type PipelineEngine = {
  /** What it runs, as messages name it. */
  readonly kind: "script" | "YAML"
  /**
   * Whether a run interrupted midway can run again, replaying its journal of
   * finished tasks. A YAML run has no journal: running its finished steps
   * again could repeat their effects.
   */
  readonly resumes: boolean
  readonly run: (run: PipelineRun, deps: YamlDeps, signal: AbortSignal) => Promise<RunResult>
}

const scriptEngine: PipelineEngine = { kind: "script", resumes: true, run: runScript }
const yamlInterpreter: PipelineEngine = { kind: "YAML", resumes: false, run: runYamlPipeline }

/** The one place that chooses between the script engine and the YAML interpreter. */
export function engineFor(contentType: ContentType): PipelineEngine {
  return contentType === "yaml" ? yamlInterpreter : scriptEngine
}
