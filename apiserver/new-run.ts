import { randomBytes } from "node:crypto"
import { RunnelError } from "../lib/core/errors.ts"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import {
  type PipelineObject,
  pipelineLabel,
  pipelineOwnerReference,
  type RunObject,
  type RunTrigger,
  type RunTriggerType,
  type RunWebhook,
  runContentAnnotations,
  runnelApiVersion,
} from "../lib/kube/resources.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { runScope, type SecretStore } from "../lib/secrets/secret-store.ts"
import type { ResourceIndex } from "./resource-index.ts"

export type NewRunDeps = {
  resources: Pick<ResourceClient, "getPipeline" | "createRun">
  index: Pick<ResourceIndex, "pipelines" | "runs">
  /** Where a run's own global secrets wait for it. */
  secrets: Pick<SecretStore, "set" | "deleteScope">
  /** Where inputs too large for a Run wait for it. */
  logs: Pick<LogStore, "attach">
  /** Queued Runs beyond which a new run answers 503. */
  maxQueueSize: number
}

/** What starts a run: spec.trigger of the Run, and what waits for it outside the Run. */
export type NewRun = {
  type: RunTriggerType
  args: string[]
  /** Who or what started it: the request's actor (`anonymous` in open access), or the webhook's provider. */
  by?: string
  webhook?: RunWebhook
  /** Global secrets for this run only (`runnel pipeline run --global-secret`). */
  globalSecrets?: Readonly<Record<string, string>>
  /** Inputs too large for the Run, kept in the log store under its id before the Run exists. */
  attachments?: Readonly<Record<string, string>>
}

/** 409 for a paused pipeline: it refuses runs, triggers and webhooks (contract.md section 4). */
export function refuseIfPaused(pipeline: PipelineObject): void {
  const name = pipeline.metadata?.name ?? ""
  if (pipeline.spec.paused === true) {
    throw new RunnelError(
      409,
      "paused",
      `pipeline "${name}" is paused; unpause it with POST /api/pipelines/${name}/unpause`,
    )
  }
}

/** Creates the Run of a pipeline already found and checked; 503 when the queue is full. */
export function admitRun(
  { resources, index, secrets, logs, maxQueueSize }: NewRunDeps,
  pipeline: PipelineObject,
  run: NewRun,
): Promise<RunObject> {
  const name = pipeline.metadata?.name ?? ""
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
    const globalSecrets = run.globalSecrets ?? {}
    const ownSecrets = Object.keys(globalSecrets).length > 0
    if (ownSecrets) await secrets.set(runScope(id), globalSecrets)
    for (const [attachment, data] of Object.entries(run.attachments ?? {})) logs.attach(id, attachment, data)
    const trigger: RunTrigger = { type: run.type, by: run.by ?? "anonymous", args: run.args }
    if (run.webhook !== undefined) trigger.webhook = run.webhook
    const created = await resources
      .createRun({
        apiVersion: runnelApiVersion,
        kind: "Run",
        metadata: {
          name: id,
          labels: { [pipelineLabel]: name },
          annotations: runContentAnnotations(pipeline.metadata?.generation ?? 1, pipeline.spec.content),
          ownerReferences: [pipelineOwnerReference(pipeline)],
        },
        spec: { pipelineRef: { name }, trigger },
      })
      .catch(async (error: unknown) => {
        if (ownSecrets) await secrets.deleteScope(runScope(id))
        throw error
      })
    index.runs.observe(created)
    return created
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
