import { errorMessage, SystemError } from "../../../lib/core/errors.ts"
import { loadYaml } from "../../../lib/yaml/load.ts"
import type { SetPipelineStep, YamlMap } from "../../../lib/yaml/types.ts"
import { ProblemList } from "../../../lib/yaml/yaml-pipeline-error.ts"
import { readArtifactFile, readFileTask } from "./artifact-files.ts"
import { lookupOf, nextTask, noteError, type Outcome, type Scope } from "./scope.ts"
import { stepError } from "./task-exec.ts"
import { interpolate, interpolateText, substituteGiven } from "./vars.ts"

export const noServerMessage =
  "set_pipeline needs the server: store this pipeline with runnel pipeline set and run it there"

/**
 * set_pipeline: reads the pipeline file from an artifact, puts in the `vars`
 * (and `var_files`, read the same way; `vars` win) it names, leaves the other
 * ((variables)) for the new pipeline's runs, and stores it through the
 * server as `name` (`self`: this pipeline). The server validates it; a
 * pipeline it refuses errors the step.
 */
export async function runSetPipelineStep(step: SetPipelineStep, scope: Scope): Promise<Outcome> {
  const slot = nextTask(scope, "set_pipeline", step.name)
  const { deps, run } = scope.state.shared
  const setPipeline = deps.setPipeline
  if (setPipeline === undefined) return stepError(scope, slot, new SystemError(noServerMessage))
  let name: string
  let file: string
  let vars: YamlMap
  try {
    const lookup = lookupOf(scope)
    name = await interpolateText(step.name, lookup, "the pipeline name")
    file = await interpolateText(step.file, lookup, "file")
    vars = await interpolate(step.vars, lookup, "vars")
  } catch (error) {
    return stepError(scope, slot, error)
  }
  let read: Awaited<ReturnType<typeof readFileTask>>
  try {
    read = await readFileTask(scope, slot, file)
  } catch (error) {
    return stepError(scope, slot, error)
  }
  if (read.outcome !== "success" || read.text === undefined) return read.outcome
  try {
    let fromFiles: YamlMap = {}
    for (const [index, varFile] of step.varFiles.entries()) {
      const text = await readArtifactFile(
        scope,
        slot,
        await interpolateText(varFile, lookupOf(scope), "var_files"),
        `${slot.path}/var-file-${index}`,
      )
      fromFiles = { ...fromFiles, ...varFileValues(text, varFile) }
    }
    const yaml = substituteGiven(read.text, { ...fromFiles, ...vars })
    await setPipeline(name === "self" ? run.pipelineName : name, yaml)
    return "success"
  } catch (error) {
    if (scope.signal.aborted) return "aborted"
    noteError(scope, `${slot.path}: ${errorMessage(error)}`)
    return "error"
  }
}

function varFileValues(text: string, file: string): YamlMap {
  const problems = new ProblemList()
  const loaded = loadYaml(text, problems)
  const root = loaded?.root
  if (!problems.empty || typeof root !== "object" || root === null || Array.isArray(root)) {
    throw new SystemError(`var file "${file}" must be a YAML mapping of vars`)
  }
  return root as YamlMap
}
