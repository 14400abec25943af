import {
  ApiException,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesObject,
  PatchStrategy,
  setHeaderOptions,
  type V1Secret,
} from "@kubernetes/client-node"
import { badRequest, RunnelError } from "../lib/core/errors.ts"
import type { RunStatus, TaskStatus } from "../lib/core/status.ts"
import type { ObjectIndex } from "./resource-index.ts"

/**
 * The Pipeline and Run resources as the API server reads and writes them
 * (crds/, contract.md section 7): only the fields it uses. The operator keeps
 * its own view; the two meet only through the resources.
 */
export type PipelineSpec = {
  content: string
  contentType?: "ts" | "js" | "yaml"
  driver?: string
  driverConfig?: Record<string, unknown>
  rbacExpression?: string
  paused?: boolean
  webhookSecretRef?: { name: string; key?: string }
}

export type PipelineResource = KubernetesObject & { spec: PipelineSpec }

/** spec.trigger.webhook: the request as the pipeline sees it; a body above 512 KiB is in the log store instead. */
export type RunWebhook = {
  provider: string
  eventType: string
  method: string
  url: string
  headers: Record<string, string>
  query: Record<string, string>
  body?: string
  bodyStored?: boolean
}

export type RunTrigger = { type?: string; by?: string; args?: string[]; webhook?: RunWebhook }

export type RunResource = KubernetesObject & {
  spec: { pipelineRef: { name: string }; trigger?: RunTrigger; stop?: boolean }
  status?: {
    phase?: RunStatus
    code?: number | null
    message?: string
    startedAt?: string | null
    finishedAt?: string | null
    webhookResponse?: { status: number; headers?: Record<string, string>; body?: string }
    tasks?: {
      path: string
      name: string
      status: TaskStatus
      code: number | null
      startedAt: string | null
      endedAt: string | null
    }[]
  }
}

/** The resource calls the routes make; each route asks only for the ones it uses. */
export type Resources = {
  /** `undefined` when there is no Pipeline of that name. */
  getPipeline(name: string): Promise<PipelineResource | undefined>
  createPipeline(pipeline: PipelineResource): Promise<PipelineResource>
  /** Replaces the whole object; its metadata.resourceVersion guards against a lost update (409). */
  replacePipeline(pipeline: PipelineResource): Promise<PipelineResource>
  patchPipeline(name: string, patch: Partial<PipelineResource>): Promise<PipelineResource | undefined>
  /** `false` when it was already gone. Its Runs go with it (owner references). */
  deletePipeline(name: string): Promise<boolean>
  getRun(name: string): Promise<RunResource | undefined>
  createRun(run: RunResource): Promise<RunResource>
  patchRun(name: string, patch: Partial<RunResource>): Promise<RunResource | undefined>
  deleteRun(name: string): Promise<boolean>
  /** Creates or replaces the core Secret that `pipeline.spec.webhookSecretRef` names, owned by the Pipeline. */
  putWebhookSecret(pipeline: PipelineResource, value: string): Promise<void>
  /** `false` when it was already gone. */
  deleteSecret(name: string): Promise<boolean>
  /**
   * The webhook secret `pipeline.spec.webhookSecretRef` names; undefined when it
   * names none. A reference to a Secret or key that is missing fails closed (503).
   */
  webhookSecret(pipeline: PipelineResource): Promise<string | undefined>
}

export const runnelApiVersion = "runnel.dev/v1alpha1"
/** The key of the webhook secret in its Secret's data when the reference names none (crds/). */
export const defaultWebhookSecretKey = "webhookSecret"
const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch)

/** The resources of one namespace through client-node: the same against the embedded API and a cluster. */
export function kubeResources(kubeConfig: KubeConfig, namespace: string): Resources {
  const objects = kubeConfig.makeApiClient(CustomObjectsApi)
  const core = kubeConfig.makeApiClient(CoreV1Api)
  const where = (plural: "pipelines" | "runs") => ({ group: "runnel.dev", version: "v1alpha1", namespace, plural })
  return {
    getPipeline: (name) => ifGone(objects.getNamespacedCustomObject({ ...where("pipelines"), name })),
    createPipeline: (body) => objects.createNamespacedCustomObject({ ...where("pipelines"), body }),
    replacePipeline: (body) =>
      objects.replaceNamespacedCustomObject({ ...where("pipelines"), name: body.metadata?.name ?? "", body }),
    patchPipeline: (name, body) =>
      ifGone(objects.patchNamespacedCustomObject({ ...where("pipelines"), name, body }, merge)),
    deletePipeline: async (name) =>
      (await ifGone(
        objects.deleteNamespacedCustomObject({ ...where("pipelines"), name, propagationPolicy: "Background" }),
      )) !== undefined,
    getRun: (name) => ifGone(objects.getNamespacedCustomObject({ ...where("runs"), name })),
    createRun: (body) => objects.createNamespacedCustomObject({ ...where("runs"), body }),
    patchRun: (name, body) => ifGone(objects.patchNamespacedCustomObject({ ...where("runs"), name, body }, merge)),
    deleteRun: async (name) =>
      (await ifGone(
        objects.deleteNamespacedCustomObject({ ...where("runs"), name, propagationPolicy: "Background" }),
      )) !== undefined,
    putWebhookSecret: async (pipeline, value) => {
      const { name: pipelineName = "", uid = "" } = pipeline.metadata ?? {}
      const ref = pipeline.spec.webhookSecretRef
      if (ref === undefined) throw new Error(`pipeline "${pipelineName}" names no webhook Secret`)
      const body: V1Secret = {
        apiVersion: "v1",
        kind: "Secret",
        metadata: {
          name: ref.name,
          labels: { "runnel.dev/pipeline": pipelineName },
          ownerReferences: [{ apiVersion: runnelApiVersion, kind: "Pipeline", name: pipelineName, uid }],
        },
        type: "Opaque",
        data: { [ref.key ?? defaultWebhookSecretKey]: Buffer.from(value, "utf8").toString("base64") },
      }
      const existing = await ifGone(core.readNamespacedSecret({ name: ref.name, namespace }))
      if (existing === undefined) await core.createNamespacedSecret({ namespace, body })
      else {
        body.metadata = { ...body.metadata, resourceVersion: existing.metadata?.resourceVersion }
        await core.replaceNamespacedSecret({ name: ref.name, namespace, body })
      }
    },
    deleteSecret: async (name) => (await ifGone(core.deleteNamespacedSecret({ name, namespace }))) !== undefined,
    webhookSecret: async (pipeline) => {
      const ref = pipeline.spec.webhookSecretRef
      if (ref === undefined) return undefined
      const key = ref.key ?? defaultWebhookSecretKey
      const secret = await ifGone(core.readNamespacedSecret({ name: ref.name, namespace }))
      const data = secret?.data?.[key]
      if (data === undefined) {
        // Verifying without the secret would accept unsigned requests: refuse them all until it is back.
        throw new RunnelError(
          503,
          "webhook_secret_missing",
          `the webhook secret of pipeline "${pipeline.metadata?.name}" (Secret "${ref.name}", key "${key}") cannot be found; store it again with PUT /api/pipelines/${pipeline.metadata?.name} and "webhook_secret"`,
        )
      }
      return Buffer.from(data, "base64").toString("utf8")
    },
  }
}

async function ifGone<T>(call: Promise<T>): Promise<T | undefined> {
  try {
    return await call
  } catch (error) {
    if (error instanceof ApiException && error.code === 404) return undefined
    throw error
  }
}

/**
 * The Pipeline a path parameter names: contract.md section 4 lets `:name` and
 * `:id` be either the name or the id (metadata.uid, itself a valid name). A
 * name is read from the Kubernetes API, an id found in the index. `undefined`
 * when neither matches; a key that is neither is a 400 stating the rule.
 */
export async function findPipeline(
  resources: Pick<Resources, "getPipeline">,
  pipelines: Pick<ObjectIndex<PipelineResource>, "find">,
  key: string,
): Promise<PipelineResource | undefined> {
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
