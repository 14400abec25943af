import type { ResourceClient } from "../lib/kube/resource-client.ts"
import type { PipelineObject } from "../lib/kube/resources.ts"
import type { ResourceVersions } from "./engine/yaml/interpret.ts"

/**
 * A pipeline's resource versions kept in its status (`status.resourceVersions`,
 * the latest per resource): read from the Pipeline the operator last saw,
 * written with a merge patch that touches only that resource's entry.
 */
export function pipelineVersions(
  client: Pick<ResourceClient, "patchPipelineStatus">,
  current: () => PipelineObject | undefined,
  pipeline: string,
  run: string,
): ResourceVersions {
  return {
    latest: async (resource) => current()?.status?.resourceVersions?.[resource]?.version,
    record: async (resource, version, metadata) => {
      await client.patchPipelineStatus(pipeline, {
        resourceVersions: {
          [resource]: { version: { ...version }, metadata: [...metadata], run, at: new Date().toISOString() },
        },
      })
    },
  }
}
