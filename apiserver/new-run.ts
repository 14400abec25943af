import { randomBytes } from "node:crypto"
import { notFound, RunnelError } from "../lib/core/errors.ts"
import { runScope, type SecretStore } from "../lib/secrets/secret-store.ts"
import type { ResourceIndex } from "./resource-index.ts"
import { findPipeline, type Resources, type RunResource, runnelApiVersion } from "./resources.ts"

export type NewRunDeps = {
  resources: Pick<Resources, "getPipeline" | "createRun">
  index: Pick<ResourceIndex, "pipelines" | "runs">
  /** Where a run's own global secrets wait for it. */
  secrets: Pick<SecretStore, "set" | "deleteScope">
  /** Queued Runs beyond which a new run answers 503. */
  maxQueueSize: number
}

/**
 * Creates a `queued` Run of the pipeline `key` names (its name or id), as
 * POST /api/pipelines/:id/trigger does: 404 for an unknown pipeline, 409 when
 * it is paused, 503 when the queue is full, all before anything is created.
 */
export async function createRun(
  { resources, index, secrets, maxQueueSize }: NewRunDeps,
  key: string,
  trigger: { type: string; args: string[] },
  globalSecrets: Readonly<Record<string, string>> = {},
): Promise<RunResource> {
  const pipeline = await findPipeline(resources, index.pipelines, key)
  if (pipeline === undefined) throw notFound("pipeline", key)
  const name = pipeline.metadata?.name ?? ""
  if (pipeline.spec.paused === true) {
    throw new RunnelError(
      409,
      "paused",
      `pipeline "${name}" is paused; unpause it with POST /api/pipelines/${name}/unpause`,
    )
  }
  // Count and create under one lock: two triggers never both see room for one more Run.
  return admitted(resources, async () => {
    const queued = index.runs.queued()
    if (queued >= maxQueueSize) {
      throw new RunnelError(
        503,
        "queue_full",
        `the run queue is full (${queued} queued runs, --max-queue-size ${maxQueueSize}); try again once runs have started`,
      )
    }
    const id = newRunId()
    // Stored before the Run exists, so the operator finds them when it starts the run.
    const ownSecrets = Object.keys(globalSecrets).length > 0
    if (ownSecrets) await secrets.set(runScope(id), globalSecrets)
    const run = await resources
      .createRun({
        apiVersion: runnelApiVersion,
        kind: "Run",
        metadata: {
          name: id,
          labels: { "runnel.dev/pipeline": name },
          ownerReferences: [
            { apiVersion: runnelApiVersion, kind: "Pipeline", name, uid: pipeline.metadata?.uid ?? "" },
          ],
        },
        spec: { pipelineRef: { name }, trigger: { type: trigger.type, by: "anonymous", args: trigger.args } },
      })
      .catch(async (error: unknown) => {
        if (ownSecrets) await secrets.deleteScope(runScope(id))
        throw error
      })
    index.runs.observe(run)
    return run
  })
}

/**
 * The tail of each resources' admission queue. One API server process admits
 * runs (ARCHITECTURE.md: the stores are on one Pod), so a lock in this process
 * makes count-then-create atomic: a Run created under the lock is in the
 * index before the next holder counts. Runs the operator starts meanwhile
 * only leave the queue, and the index learns of that from the watch a little
 * later, so the count may run high for a moment, never low.
 */
const admissionTails = new WeakMap<object, Promise<unknown>>()

function admitted<T>(resources: object, admit: () => Promise<T>): Promise<T> {
  const previous = admissionTails.get(resources) ?? Promise.resolve()
  const result = previous.then(admit, admit)
  const tail = result.catch(() => {})
  admissionTails.set(resources, tail)
  void tail.then(() => {
    if (admissionTails.get(resources) === tail) admissionTails.delete(resources)
  })
  return result
}

/** Sortable by creation (time first), unique without coordination. */
export const newRunId = () => `run-${Date.now().toString(36)}-${randomBytes(4).toString("hex")}`
