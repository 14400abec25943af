import { createHash } from "node:crypto"
import { isFinalRunStatus, type RunStatus, type TaskStatus } from "../core/status.ts"
import type { WebhookResponse } from "../core/webhook-request.ts"
import type { ContentType } from "../script/content-type.ts"
import type { KubernetesObject, V1OwnerReference } from "./client-node.js"

/**
 * runnel's resources as crds/ defines them (contract.md section 7), written
 * once for both roles: the operator and the API server each read and write
 * the fields they use, and meet only through these resources. Only types,
 * constants and pure helpers here (client-node is imported for its types
 * alone), so that anything may name a resource without loading a client;
 * the calls are in resource-client.ts.
 */
export const runnelGroup = "runnel.dev"
export const runnelVersion = "v1alpha1"
export const runnelApiVersion = `${runnelGroup}/${runnelVersion}`

/** The plural of each of runnel's kinds, as paths and client-node's custom object calls name them. */
export type RunnelPlural = "pipelines" | "runs" | "schedules" | "gates"

/** `/apis/runnel.dev/v1alpha1/namespaces/NS/PLURAL`: where a kind of one namespace is listed and watched. */
export const resourcePath = (namespace: string, plural: RunnelPlural) =>
  `/apis/${runnelGroup}/${runnelVersion}/namespaces/${namespace}/${plural}`

/** The label on Runs, Schedules and webhook Secrets that names their Pipeline. */
export const pipelineLabel = "runnel.dev/pipeline"

/**
 * Who last changed an object through `runnel server`'s embedded API at /k8s: the user's actor
 * (`github:octocat`, `basic:admin`), set by the embedded API itself (a client's value is replaced), absent
 * when runnel wrote it or in open access. A cluster does not set it, so only `runnel server` trusts it.
 */
export const changedByAnnotation = "runnel.dev/changed-by"

/** Annotations the operator writes on a Run when it admits it: what a resumed run must still find. */
export const runAnnotations = {
  generation: "runnel.dev/pipeline-generation",
  contentSha256: "runnel.dev/content-sha256",
} as const

/**
 * The runAnnotations of a run of `content` at `generation`. The API server
 * sets them when it creates a Run from the Pipeline it has in hand, so that
 * the operator, admitting it on the same content, has nothing to patch.
 */
export const runContentAnnotations = (generation: number, content: string): Record<string, string> => ({
  [runAnnotations.generation]: String(generation),
  [runAnnotations.contentSha256]: createHash("sha256").update(content).digest("hex"),
})

/** The key of the webhook secret in its Secret's data when the reference names none (crds/). */
export const defaultWebhookSecretKey = "webhookSecret"

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
  /** Absent: inferred from the content (contentTypeOf in lib/script/content-type.ts). */
  contentType?: ContentType
  /** Absent: the server's `--driver`. */
  driver?: string
  driverConfig?: Record<string, unknown>
  rbacExpression?: string
  paused?: boolean
  /** The core Secret, owned by the Pipeline, that holds its webhook secret. */
  webhookSecretRef?: { name: string; key?: string }
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

/** `spec.trigger.type`: what started a run (crds/runs.runnel.dev.yaml); absent means `manual`. */
export type RunTriggerType = "manual" | "args" | "webhook" | "schedule" | "cli"

export type RunTrigger = {
  type?: RunTriggerType
  /** Who or what started it (`anonymous` until authentication arrives, a provider for webhooks). */
  by?: string
  args?: string[]
  /** YAML pipelines: only these jobs (a Schedule's); the whole pipeline when absent. */
  jobs?: string[]
  webhook?: RunWebhook
}

/**
 * `spec.trigger.webhook`: the request that started a webhook run, as the
 * pipeline's `http.request()` will see it (WebhookRequest in lib/core). Every
 * field may be missing from a Run someone else created, so readers default them.
 */
export type RunWebhook = {
  provider?: string
  eventType?: string
  method?: string
  url?: string
  headers?: Record<string, string>
  query?: Record<string, string>
  /** Absent when `bodyStored` is true. */
  body?: string
  /** The body was too large for the Run (above 512 KiB); it is the log store's attachment `webhook-body` of the run. */
  bodyStored?: boolean
}

/** One task of `status.tasks`: a task without its output. */
export type StatusTask = {
  path: string
  name: string
  status: TaskStatus
  code: number | null
  startedAt: string | null
  endedAt: string | null
}

/**
 * `status.webhookResponse`: what the pipeline answered with `http.respond()`.
 * The operator writes a whole WebhookResponse (lib/core); crds/ requires only
 * `status`, so a reader defaults the rest.
 */
export type RunWebhookResponse = Pick<WebhookResponse, "status"> & Partial<WebhookResponse>

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
  webhookResponse?: RunWebhookResponse
}

export type RunObject = KubernetesObject & {
  spec: {
    pipelineRef: { name: string }
    /** The Pipeline generation the run executes; the operator sets it when it admits the run. */
    pipelineGeneration?: number
    trigger?: RunTrigger
    /** True stops the run. */
    stop?: boolean
  }
  status?: RunStatusFields
}

export type ScheduleObject = KubernetesObject & {
  spec: {
    pipelineRef: { name: string }
    /** The job to run; "" (the CRD's default) for the whole pipeline. */
    jobName: string
    type: "cron" | "interval"
    /** A cron expression, or a Go-style duration for `interval`. */
    expression: string
    /** `cron`: the IANA time zone of the expression; UTC when absent. */
    timeZone?: string
    /** The run's `pipelineContext.args`. */
    args?: string[]
    /** The last missed tick fires once after downtime if it is at most this old; 300 when absent. */
    startingDeadlineSeconds?: number
    enabled?: boolean
  }
  status?: {
    lastRunAt?: string | null
    nextRunAt?: string | null
    observedGeneration?: number
    conditions?: Condition[]
  }
}

/** The label on the Schedules the operator derives from a YAML pipeline, which it alone creates and deletes. */
export const derivedScheduleLabel = "runnel.dev/derived-from"

/** The label on a Run a Schedule started: the Schedule's name. */
export const scheduleLabel = "runnel.dev/schedule"

/** Annotations on a Run a Schedule started: the tick it is for, and when it was created (both RFC 3339, milliseconds). */
export const scheduledRunAnnotations = { dueAt: "runnel.dev/due-at", firedAt: "runnel.dev/fired-at" } as const

/**
 * The name of the one Run of a schedule's tick: `<schedule>-<tick in Unix
 * seconds>`. Whoever fires the tick (a timer, a second operator, a retried
 * CronJob) creates the same name, so every create after the first is a 409.
 */
export const scheduledRunName = (schedule: string, dueMs: number) => `${schedule}-${Math.floor(dueMs / 1000)}`

/**
 * The Run of one tick of a Schedule, the same whoever creates it: trigger
 * type `schedule`, `triggered_by` the Schedule's name, the schedule's job (or
 * the whole pipeline) and args; owned by the Pipeline so it goes with it.
 */
export function scheduledRun(
  schedule: ScheduleObject,
  pipeline: PipelineObject,
  dueMs: number,
  firedMs: number,
): RunObject {
  const scheduleName = schedule.metadata?.name ?? ""
  const pipelineName = schedule.spec.pipelineRef.name
  const trigger: RunTrigger = { type: "schedule", by: scheduleName, args: [...(schedule.spec.args ?? [])] }
  if (schedule.spec.jobName !== undefined && schedule.spec.jobName !== "") trigger.jobs = [schedule.spec.jobName]
  return {
    apiVersion: runnelApiVersion,
    kind: "Run",
    metadata: {
      name: scheduledRunName(scheduleName, dueMs),
      labels: { [pipelineLabel]: pipelineName, [scheduleLabel]: scheduleName },
      annotations: {
        [scheduledRunAnnotations.dueAt]: new Date(dueMs).toISOString(),
        [scheduledRunAnnotations.firedAt]: new Date(firedMs).toISOString(),
      },
      ownerReferences: [pipelineOwnerReference(pipeline)],
    },
    spec: { pipelineRef: { name: pipelineName }, trigger },
  }
}

/** `status.phase` of a Gate; absent means pending. */
export type GatePhase = "pending" | "approved" | "rejected" | "expired"

/** A person's decision on a Gate (`spec.decision`): final once written; the operator copies it into the status. */
export type GateDecision = {
  phase: "approved" | "rejected"
  /** Who decided; the operator records `kubectl` when absent. */
  by?: string
  comment?: string
}

/** An approval a running pipeline waits on (crds/gates.runnel.dev.yaml), owned by its Run. */
export type GateObject = KubernetesObject & {
  spec: {
    /** The Run, in the Gate's namespace, that waits on it. Immutable. */
    runRef: { name: string }
    /** The gate's name within the run, as the script passed it to `pipeline.gate()`. Immutable. */
    name: string
    message?: string
    /** A Go-style duration counted from the gate's creation; absent, it waits until resolved. */
    timeout?: string
    /** A CEL expression over the user that a REST approver must satisfy, beside the pipeline's RBAC. */
    approvers?: string
    decision?: GateDecision
  }
  status?: {
    phase?: GatePhase
    resolvedAt?: string | null
    /** `<provider>:<user>`; empty while pending or when it expired. */
    resolvedBy?: string
    comment?: string
  }
}

/** The label on Gates that names their Run. */
export const runLabel = "runnel.dev/run"

/** Annotations on a Gate: its creation time to the millisecond (creationTimestamp has whole seconds), for expiry. */
export const gateAnnotations = { createdAt: "runnel.dev/created-at" } as const

/** The id (metadata.name) of a run's `n`th gate, counted from 1 in the order the pipeline asks for them. */
export const gateId = (runName: string, n: number) => `${runName}-gate-${n}`

export const isFinalGate = (gate: GateObject) => (gate.status?.phase ?? "pending") !== "pending"

/** When the gate was created, in epoch milliseconds: what its timeout counts from. */
export function gateCreatedAt(gate: GateObject): number {
  const precise = Date.parse(gate.metadata?.annotations?.[gateAnnotations.createdAt] ?? "")
  if (!Number.isNaN(precise)) return precise
  return Date.parse(String(gate.metadata?.creationTimestamp ?? "")) || Date.now()
}

type Owner = { readonly metadata?: { readonly name?: string; readonly uid?: string } }

/** The owner reference to one of runnel's objects, so that Kubernetes deletes the dependent with it. */
export function ownerReference(kind: "Pipeline" | "Run" | "Schedule", owner: Owner): V1OwnerReference {
  return { apiVersion: runnelApiVersion, kind, name: owner.metadata?.name ?? "", uid: owner.metadata?.uid ?? "" }
}

/** A Gate belongs to its Run. */
export const runOwnerReference = (run: Owner) => ownerReference("Run", run)

/** A Run, a Schedule or a webhook Secret belongs to its Pipeline. */
export const pipelineOwnerReference = (pipeline: Owner) => ownerReference("Pipeline", pipeline)

export const isFinal = (run: RunObject) => isFinalRunStatus(run.status?.phase)

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
