import { errorMessage } from "../core/errors.ts"
import { parseYamlPipeline } from "../yaml/parse.ts"
import { YamlPipelineError } from "../yaml/yaml-pipeline-error.ts"
import { compileScript } from "./compile.ts"

/** The script kinds of a pipeline's content. */
export type ScriptType = "ts" | "js"

/** What checking a pipeline's content found: the problem that refuses it, or notes to show beside "ok". */
export type ContentCheckResult = { readonly problem?: string; readonly notes: readonly string[] }

/**
 * Checks a pipeline's content without running any of it: a script as
 * scriptProblem() does, YAML as Concourse's `fly set-pipeline` would (every
 * problem with its path and line; top-level keys it ignores are notes).
 */
export async function checkContent(
  name: string,
  contentType: ScriptType | "yaml",
  content: string,
): Promise<ContentCheckResult> {
  if (contentType !== "yaml") {
    const problem = await scriptProblem(name, contentType, content)
    return problem === undefined ? { notes: [] } : { problem, notes: [] }
  }
  try {
    return { notes: parseYamlPipeline(content, { source: `${name}.yaml` }).notes }
  } catch (error) {
    if (error instanceof YamlPipelineError) return { problem: error.message, notes: [] }
    throw error
  }
}

/**
 * Checks a pipeline script without running any of it: it must compile and
 * export a `pipeline` function (named or default). Answers `undefined` when
 * it does, else the message to show, with the compiler's file, line and column.
 * `name` is the pipeline's name, shown in the messages as the file.
 */
export async function scriptProblem(
  name: string,
  scriptType: ScriptType,
  content: string,
): Promise<string | undefined> {
  const filename = scriptFilename(name, scriptType)
  let code: string
  try {
    code = (await compileScript(content, filename)).code
  } catch (error) {
    return errorMessage(error)
  }
  if (!exportsPipeline(code)) {
    return `${filename} does not export a pipeline function; add \`export const pipeline = async () => { ... }\` or \`export default async function () { ... }\``
  }
  return undefined
}

/** The name a script is compiled under, so that messages and stack positions say `build.ts:3:7`. */
export function scriptFilename(name: string, scriptType: ScriptType | "yaml"): string {
  return `${name}.${scriptType === "js" ? "js" : "ts"}`
}

/**
 * Reads the exports from esbuild's CommonJS output without running it: an
 * ES module's exports are listed in one `__export(..., { name: () => ... })`
 * call. A script written as CommonJS (`exports.pipeline = ...`,
 * `module.exports = ...`) is given the benefit of the doubt; the sandbox
 * says so at run time if it is wrong.
 */
export function exportsPipeline(code: string): boolean {
  const listed = /__export\([\w$]+, \{\n((?:\s+[\w$]+: \(\) => [\w$]+,?\n)*)\}\)/.exec(code)
  if (listed !== null) {
    const names = [...(listed[1] ?? "").matchAll(/^\s+([\w$]+):/gm)].map((match) => match[1])
    return names.includes("pipeline") || names.includes("default")
  }
  return /\bmodule\.exports\s*=|\bexports\.(pipeline|default)\s*=/.test(code)
}
