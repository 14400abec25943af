import { notFound, RunnelError } from "../lib/core/errors.ts"
import { isFinalRunStatus } from "../lib/core/status.ts"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import type { RunObject } from "../lib/kube/resources.ts"
import type { ResourceIndex } from "./resource-index.ts"

/**
 * Asks the operator to stop a queued or running Run (`spec.stop`), as
 * POST /api/runs/:id/stop does: 409 when it has already finished. The index
 * sees the write at once, so the caller's next read shows it.
 */
export async function stopRun(
  deps: { resources: Pick<ResourceClient, "patchRun">; index: Pick<ResourceIndex, "runs"> },
  run: RunObject,
): Promise<RunObject> {
  const id = run.metadata?.name ?? ""
  const phase = run.status?.phase ?? "queued"
  if (isFinalRunStatus(phase)) {
    throw new RunnelError(
      409,
      "finished",
      `run "${id}" has already finished with status ${phase}; there is nothing to stop`,
    )
  }
  const stopped = await deps.resources.patchRun(id, { spec: { stop: true } } as Partial<RunObject>)
  if (stopped === undefined) throw notFound("run", id)
  deps.index.runs.observe(stopped)
  return stopped
}
