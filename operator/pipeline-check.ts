import { errorMessage } from "../lib/core/errors.ts"
import { compileScript } from "./engine/sandbox/compile.ts"
import { type ContentType, contentTypeOf, type PipelineSpec } from "./resources.ts"

/** What the Pipeline reconciler writes as the `Ready` condition. */
export type ContentCheck = {
  readonly status: "True" | "False" | "Unknown"
  readonly reason: string
  readonly message: string
}

/**
 * Checks a pipeline's content without running any of it: a script must
 * compile and export a `pipeline` function (named or default); YAML is not
 * validated yet. `name` is the Pipeline's name, shown in the messages as the file.
 */
export async function checkPipelineContent(name: string, spec: PipelineSpec): Promise<ContentCheck> {
  const contentType = contentTypeOf(spec)
  if (contentType === "yaml") {
    return {
      status: "Unknown",
      reason: "YamlNotSupportedYet",
      message: "YAML pipelines are not validated or run by this version of runnel yet",
    }
  }
  const filename = scriptFilename(name, contentType)
  let code: string
  try {
    code = (await compileScript(spec.content, filename)).code
  } catch (error) {
    return { status: "False", reason: "InvalidContent", message: errorMessage(error) }
  }
  if (!exportsPipeline(code)) {
    return {
      status: "False",
      reason: "InvalidContent",
      message: `${filename} does not export a pipeline function; add \`export const pipeline = async () => { ... }\` or \`export default async function () { ... }\``,
    }
  }
  return { status: "True", reason: "Compiled", message: `${filename} compiled and exports a pipeline` }
}

/** The name a script is compiled under, so that messages and stack positions say `build.ts:3:7`. */
export function scriptFilename(name: string, contentType: ContentType): string {
  return `${name}.${contentType === "js" ? "js" : "ts"}`
}

/**
 * Reads the exports from esbuild's CommonJS output without running it: an
 * ES module's exports are listed in one `__export(..., { name: () => ... })`
 * call. A script written as CommonJS (`exports.pipeline = ...`,
 * `module.exports = ...`) is given the benefit of the doubt; the sandbox
 * says so at run time if it is wrong.
 */
function exportsPipeline(code: string): boolean {
  const listed = /__export\([\w$]+, \{\n((?:\s+[\w$]+: \(\) => [\w$]+,?\n)*)\}\)/.exec(code)
  if (listed !== null) {
    const names = [...(listed[1] ?? "").matchAll(/^\s+([\w$]+):/gm)].map((match) => match[1])
    return names.includes("pipeline") || names.includes("default")
  }
  return /\bmodule\.exports\s*=|\bexports\.(pipeline|default)\s*=/.test(code)
}
