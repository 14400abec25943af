import { compileExpression } from "../lib/cel/expression.ts"
import { errorMessage } from "../lib/core/errors.ts"
import type { PipelineSpec } from "../lib/kube/resources.ts"
import { contentTypeOf } from "../lib/script/content-type.ts"
import { checkContent, scriptFilename } from "../lib/script/pipeline-check.ts"

/** What the Pipeline reconciler writes as the `Ready` condition. */
export type ContentCheck = {
  readonly status: "True" | "False" | "Unknown"
  readonly reason: string
  readonly message: string
}

/**
 * Checks a pipeline's content without running any of it (lib/script/pipeline-check.ts,
 * which the API server also uses at store time), and its rbac_expression as the API
 * server compiles it (one applied with kubectl that does not compile hides the
 * pipeline from every authenticated user). `name` is the Pipeline's name, shown in
 * the messages as the file.
 */
export async function checkPipelineContent(name: string, spec: PipelineSpec): Promise<ContentCheck> {
  if (spec.rbacExpression !== undefined && spec.rbacExpression !== "") {
    try {
      compileExpression("rbac", spec.rbacExpression)
    } catch (error) {
      return { status: "False", reason: "InvalidRbacExpression", message: `rbacExpression: ${errorMessage(error)}` }
    }
  }
  const contentType = contentTypeOf(spec)
  const { problem, notes } = await checkContent(name, contentType, spec.content)
  if (problem !== undefined) return { status: "False", reason: "InvalidContent", message: problem }
  if (contentType === "yaml") {
    const noted = notes.length === 0 ? "" : ` (${notes.join("; ")})`
    return { status: "True", reason: "Validated", message: `${name}.yaml is a valid pipeline${noted}` }
  }
  const filename = scriptFilename(name, contentType)
  return { status: "True", reason: "Compiled", message: `${filename} compiled and exports a pipeline` }
}
