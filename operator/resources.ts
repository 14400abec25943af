import type { KubernetesObject } from "@kubernetes/client-node"
import { isFinalRunStatus, type RunStatus, type TaskStatus } from "../lib/core/status.ts"
import type { WebhookResponse } from "../lib/core/webhook-request.ts"
import { type ContentType, inferContentType } from "../lib/script/content-type.ts"

/** runnel's resources as crds/ defines them; only the fields the operator reads or writes. */
export const runnelGroup = "runnel.dev"
export const runnelVersion = "v1alpha1"
export const runnelApiVersion = `${runnelGroup}/${runnelVersion}`

export type Condition = {
  type: string
  status: "True" | "False" | "Unknown"
  reason: string
  message: string
  lastTransitionTime: string
  observedGeneration?: number
}

export type PipelineSpec = {
  content: string
  contentType?: ContentType
  driver?: string
  driverConfig?: Record<string, unknown>
  paused?: boolean
}

/** The label on Runs and Schedules that names their Pipeline. */
export const pipelineLabel = "runnel.dev/pipeline"

export type ScheduleObject = KubernetesObject & {
  spec: {
    pipelineRef: { name: string }
    jobName: string
    type: "cron" | "interval"
    expression: string
    enabled?: boolean
  }
}

export type PipelineObject = KubernetesObject & {
  spec: PipelineSpec
  status?: {
    observedGeneration?: number
    conditions?: Condition[]
    /** YAML pipelines: the latest version of each resource a run fetched or put. */
    resourceVersions?: Record<
      string,
      { version: Record<string, string>; metadata?: { name: string; value: string }[]; run?: string; at?: string }
    >
  }
}

export type RunTrigger = {
  type?: "manual" | "args" | "webhook" | "schedule" | "cli"
  by?: string
  args?: string[]
  /** YAML pipelines: only these jobs (a Schedule's); the whole pipeline when absent. */
  jobs?: string[]
  webhook?: RunWebhook
}

/** `spec.trigger.webhook`: the request that started a webhook run. */
export type RunWebhook = {
  provider?: string
  eventType?: string
  method?: string
  url?: string
  headers?: Record<string, string>
  query?: Record<string, string>
  /** Absent when `bodyStored` is true. */
  body?: string
  /** The body was too large for the Run; it is the log store's attachment `webhook-body` of the run. */
  bodyStored?: boolean
}

export type StatusTask = {
  path: string
  name: string
  status: TaskStatus
  code: number | null
  startedAt: string | null
  endedAt: string | null
}

export type RunStatusFields = {
  phase?: RunStatus
  code?: number | null
  message?: string
  startedAt?: string | null
  finishedAt?: string | null
  duration?: string
  tasks?: StatusTask[]
  observedGeneration?: number
  conditions?: Condition[]
  /** The pipeline's `http.respond()`, which the API server sends to the webhook's caller. */
  webhookResponse?: WebhookResponse
}

export type RunObject = KubernetesObject & {
  spec: { pipelineRef: { name: string }; pipelineGeneration?: number; trigger?: RunTrigger; stop?: boolean }
  status?: RunStatusFields
}

/** Annotations the operator writes on a Run when it admits it: what a resumed run must still find. */
export const runAnnotations = {
  generation: "runnel.dev/pipeline-generation",
  contentSha256: "runnel.dev/content-sha256",
} as const

export const isFinal = (run: RunObject) => isFinalRunStatus(run.status?.phase)

/** `namespace/name`: how the operator keys objects in its maps. */
export const keyOf = (object: KubernetesObject) => `${object.metadata?.namespace ?? ""}/${object.metadata?.name ?? ""}`

/**
 * The content type of a pipeline: `spec.contentType`, else inferred as
 * contract.md section 4 says.
 */
export function contentTypeOf(spec: PipelineSpec): ContentType {
  return spec.contentType ?? inferContentType(spec.content)
}

/**
 * `conditions` with `next` in place of the condition of its type. The
 * transition time moves only when the status does, as Kubernetes' convention asks.
 */
export function withCondition(conditions: readonly Condition[] | undefined, next: Condition): Condition[] {
  const list = [...(conditions ?? [])]
  const at = list.findIndex((condition) => condition.type === next.type)
  const previous = at === -1 ? undefined : list[at]
  const merged =
    previous !== undefined && previous.status === next.status
      ? { ...next, lastTransitionTime: previous.lastTransitionTime }
      : next
  if (at === -1) list.push(merged)
  else list[at] = merged
  return list
}

/** Kubernetes timestamps have whole seconds. */
export const kubeTime = (date = new Date()) => date.toISOString().replace(/\.\d+Z$/, "Z")
