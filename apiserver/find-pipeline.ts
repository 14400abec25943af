import { badRequest } from "../lib/core/errors.ts"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import type { PipelineObject } from "../lib/kube/resources.ts"
import type { ObjectIndex } from "./resource-index.ts"

/**
 * The Pipeline a path parameter names: contract.md section 4 lets `:name` and
 * `:id` be either the name or the id (metadata.uid, itself a valid name). A
 * name is read from the Kubernetes API, an id found in the index. `undefined`
 * when neither matches; a key that is neither is a 400 stating the rule.
 */
export async function findPipeline(
  resources: Pick<ResourceClient, "getPipeline">,
  pipelines: Pick<ObjectIndex<PipelineObject>, "find">,
  key: string,
): Promise<PipelineObject | undefined> {
  checkPipelineName(key)
  const byName = await resources.getPipeline(key)
  return byName ?? pipelines.find((pipeline) => pipeline.metadata?.uid === key)
}

export function checkPipelineName(name: string): void {
  if (!isResourceName(name)) {
    throw badRequest(
      `pipeline name "${name}" is not valid: use lowercase letters, digits, "-" and ".", start and end with a letter or digit, at most 63 characters`,
    )
  }
}

/** Kubernetes resource names (contract.md section 4). */
export const isResourceName = (name: string) => name.length <= 63 && /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(name)
