import { SystemError } from "../../../lib/core/errors.ts"
import { loadYaml } from "../../../lib/yaml/load.ts"
import type { LoadVarStep, YamlValue } from "../../../lib/yaml/types.ts"
import { ProblemList } from "../../../lib/yaml/yaml-pipeline-error.ts"
import { readFileTask } from "./artifact-files.ts"
import { lookupOf, nextTask, type Outcome, type Scope } from "./scope.ts"
import { stepError } from "./task-exec.ts"
import { addLeaves, interpolateText } from "./vars.ts"

/**
 * load_var: reads a file from an artifact into the local var `((.:name))` of
 * the job's later steps. The format is given or follows the extension (.json,
 * .yml/.yaml, else the text trimmed). Its values are redacted unless `reveal:
 * true`, as Concourse does. A file that cannot be read fails the step (its
 * task exited non-zero); one that does not parse errors it.
 */
export async function runLoadVarStep(step: LoadVarStep, scope: Scope): Promise<Outcome> {
  const slot = nextTask(scope, "load_var", step.name)
  let file: string
  try {
    file = await interpolateText(step.file, lookupOf(scope), "file")
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
  let value: YamlValue
  try {
    value = parse(read.text, step.format ?? formatOf(file), file)
  } catch (error) {
    return stepError(scope, slot, error)
  }
  if (!step.reveal) addLeaves(scope.state.shared.redactor, value)
  scope.locals.set(step.name, value)
  return "success"
}

function formatOf(file: string): "json" | "yaml" | "trim" {
  if (file.endsWith(".json")) return "json"
  if (file.endsWith(".yml") || file.endsWith(".yaml")) return "yaml"
  return "trim"
}

function parse(text: string, format: NonNullable<LoadVarStep["format"]>, file: string): YamlValue {
  switch (format) {
    case "raw":
      return text
    case "trim":
      return text.trim()
    case "json":
      try {
        return JSON.parse(text) as YamlValue
      } catch (error) {
        throw new SystemError(`load_var: "${file}" is not JSON: ${(error as Error).message}`)
      }
    case "yaml":
    case "yml": {
      const problems = new ProblemList()
      const loaded = loadYaml(text, problems)
      if (loaded === undefined || !problems.empty) {
        try {
          problems.fail(file)
        } catch (error) {
          throw new SystemError(`load_var: "${file}" is not YAML: ${(error as Error).message}`)
        }
      }
      return loaded?.root ?? null
    }
  }
}
