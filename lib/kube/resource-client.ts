import { RunnelError } from "../core/errors.ts"
import {
  ApiException,
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  PatchStrategy,
  setHeaderOptions,
  type V1CronJob,
  type V1Secret,
  type V1SecretList,
} from "./client-node.js"
import {
  defaultWebhookSecretKey,
  derivedScheduleLabel,
  type GateObject,
  type PipelineObject,
  pipelineLabel,
  pipelineOwnerReference,
  type RunnelPlural,
  type RunObject,
  type RunStatusFields,
  resourcePath,
  runLabel,
  runnelApiVersion,
  runnelGroup,
  runnelVersion,
  type ScheduleObject,
} from "./resources.ts"

const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch)

/** The label every webhook Secret runnel writes has (its Pipeline's name), as a selector. */
export const webhookSecretSelector = pipelineLabel

/**
 * The calls both roles make on runnel's resources and its webhook Secrets, in
 * one namespace, through `@kubernetes/client-node`: the same against the
 * embedded API and a real cluster. Each role takes the calls it uses
 * (`Pick<ResourceClient, "getRun">`): the operator reads Pipelines and writes
 * statuses, the API server writes specs and Secrets.
 * - A call on an object that is gone resolves `undefined` (a delete, `false`);
 *   every other failure rejects with client-node's ApiException.
 * - Patches are JSON merge patches (no resourceVersion): the operator is the
 *   only writer of a status, and a patch never loses to a stale read. A
 *   replace carries the resourceVersion it read, and a stale one is a 409.
 */
export class ResourceClient {
  readonly namespace: string
  readonly #objects: CustomObjectsApi
  readonly #core: CoreV1Api
  readonly #batch: BatchV1Api

  constructor(kubeConfig: KubeConfig, namespace: string) {
    this.namespace = namespace
    this.#objects = kubeConfig.makeApiClient(CustomObjectsApi)
    this.#core = kubeConfig.makeApiClient(CoreV1Api)
    this.#batch = kubeConfig.makeApiClient(BatchV1Api)
  }

  /** `/apis/runnel.dev/v1alpha1/namespaces/NS/PLURAL`, the path informers watch. */
  path(plural: RunnelPlural): string {
    return resourcePath(this.namespace, plural)
  }

  /** `/api/v1/namespaces/NS/secrets`, where the API server's index watches the webhook Secrets. */
  secretsPath(): string {
    return `/api/v1/namespaces/${this.namespace}/secrets`
  }

  /** The webhook Secrets runnel wrote (labelled with their Pipeline's name), and no other Secret. */
  listWebhookSecrets(): Promise<V1SecretList> {
    return this.#core.listNamespacedSecret({ namespace: this.namespace, labelSelector: webhookSecretSelector })
  }

  list<T extends KubernetesObject>(plural: RunnelPlural): Promise<KubernetesListObject<T>> {
    return this.#objects.listNamespacedCustomObject({ ...this.#where(plural) })
  }

  getPipeline(name: string): Promise<PipelineObject | undefined> {
    return ifGone(this.#objects.getNamespacedCustomObject({ ...this.#where("pipelines"), name }))
  }

  createPipeline(pipeline: PipelineObject): Promise<PipelineObject> {
    return this.#objects.createNamespacedCustomObject({ ...this.#where("pipelines"), body: pipeline })
  }

  /** Replaces the whole object; its metadata.resourceVersion guards against a lost update (409). */
  replacePipeline(pipeline: PipelineObject): Promise<PipelineObject> {
    return this.#objects.replaceNamespacedCustomObject({
      ...this.#where("pipelines"),
      name: pipeline.metadata?.name ?? "",
      body: pipeline,
    })
  }

  patchPipeline(name: string, patch: Partial<PipelineObject>): Promise<PipelineObject | undefined> {
    return ifGone(this.#objects.patchNamespacedCustomObject({ ...this.#where("pipelines"), name, body: patch }, merge))
  }

  patchPipelineStatus(name: string, status: PipelineObject["status"]): Promise<PipelineObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObjectStatus({ ...this.#where("pipelines"), name, body: { status } }, merge),
    )
  }

  /**
   * A YAML run's set_pipeline: replaces the content of Pipeline `name`, or
   * creates it (driver and everything else at their defaults).
   */
  async setPipeline(name: string, yaml: string): Promise<void> {
    const spec = { content: yaml, contentType: "yaml" as const }
    if ((await this.patchPipeline(name, { spec })) !== undefined) return
    await this.createPipeline({ apiVersion: runnelApiVersion, kind: "Pipeline", metadata: { name }, spec })
  }

  /** `false` when it was already gone. Its Runs, Schedules and webhook Secret go with it (owner references). */
  deletePipeline(name: string): Promise<boolean> {
    return this.#delete("pipelines", name, "Background")
  }

  getRun(name: string): Promise<RunObject | undefined> {
    return ifGone(this.#objects.getNamespacedCustomObject({ ...this.#where("runs"), name }))
  }

  createRun(run: RunObject): Promise<RunObject> {
    return this.#objects.createNamespacedCustomObject({ ...this.#where("runs"), body: run })
  }

  /**
   * Creates a Run whose name says what it is for (a schedule's tick): true
   * when this call created it, false when it already existed (409), so that
   * a second operator, a restart or a retried Job never starts a second run.
   */
  async createRunOnce(run: RunObject): Promise<boolean> {
    try {
      await this.createRun(run)
      return true
    } catch (error) {
      if (isConflict(error)) return false
      throw error
    }
  }

  patchRun(name: string, patch: Partial<RunObject>): Promise<RunObject | undefined> {
    return ifGone(this.#objects.patchNamespacedCustomObject({ ...this.#where("runs"), name, body: patch }, merge))
  }

  patchRunMetadata(name: string, metadata: NonNullable<RunObject["metadata"]>): Promise<RunObject | undefined> {
    return this.patchRun(name, { metadata })
  }

  patchRunStatus(name: string, status: RunStatusFields): Promise<RunObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObjectStatus({ ...this.#where("runs"), name, body: { status } }, merge),
    )
  }

  /** `false` when it was already gone. */
  deleteRun(name: string): Promise<boolean> {
    return this.#delete("runs", name, "Background")
  }

  /** The Schedules the operator derived from one Pipeline's YAML (labels `runnel.dev/pipeline` and `runnel.dev/derived-from`). */
  async listSchedules(pipeline: string): Promise<ScheduleObject[]> {
    const list = (await this.#objects.listNamespacedCustomObject({
      ...this.#where("schedules"),
      labelSelector: `${pipelineLabel}=${pipeline},${derivedScheduleLabel}=yaml`,
    })) as KubernetesListObject<ScheduleObject>
    return list.items
  }

  getSchedule(name: string): Promise<ScheduleObject | undefined> {
    return ifGone(this.#objects.getNamespacedCustomObject({ ...this.#where("schedules"), name }))
  }

  patchScheduleStatus(
    name: string,
    status: NonNullable<ScheduleObject["status"]>,
  ): Promise<ScheduleObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObjectStatus({ ...this.#where("schedules"), name, body: { status } }, merge),
    )
  }

  /** Sets `spec.enabled`, and the update time the REST view shows. */
  patchScheduleEnabled(name: string, enabled: boolean, annotations: Record<string, string>) {
    return ifGone<ScheduleObject>(
      this.#objects.patchNamespacedCustomObject(
        { ...this.#where("schedules"), name, body: { metadata: { annotations }, spec: { enabled } } },
        merge,
      ),
    )
  }

  createSchedule(schedule: ScheduleObject): Promise<ScheduleObject> {
    return this.#objects.createNamespacedCustomObject({ ...this.#where("schedules"), body: schedule })
  }

  patchScheduleSpec(name: string, spec: Partial<ScheduleObject["spec"]>): Promise<ScheduleObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObject({ ...this.#where("schedules"), name, body: { spec } }, merge),
    )
  }

  /** `false` when it was already gone. */
  deleteSchedule(name: string): Promise<boolean> {
    return this.#delete("schedules", name)
  }

  getGate(name: string): Promise<GateObject | undefined> {
    return ifGone(this.#objects.getNamespacedCustomObject({ ...this.#where("gates"), name }))
  }

  /** The Gates of one Run (label `runnel.dev/run`), or of every run. */
  async listGates(run?: string): Promise<GateObject[]> {
    const list = (await this.#objects.listNamespacedCustomObject({
      ...this.#where("gates"),
      ...(run === undefined ? {} : { labelSelector: `${runLabel}=${run}` }),
    })) as KubernetesListObject<GateObject>
    return list.items
  }

  createGate(gate: GateObject): Promise<GateObject> {
    return this.#objects.createNamespacedCustomObject({ ...this.#where("gates"), body: gate })
  }

  /**
   * Writes a person's decision into `spec.decision`, guarded by the
   * resourceVersion the caller read: a gate decided or resolved meanwhile is a 409.
   */
  decideGate(gate: GateObject, decision: NonNullable<GateObject["spec"]["decision"]>): Promise<GateObject | undefined> {
    const body = { metadata: { resourceVersion: gate.metadata?.resourceVersion }, spec: { decision } }
    return ifGone(
      this.#objects.patchNamespacedCustomObject(
        { ...this.#where("gates"), name: gate.metadata?.name ?? "", body },
        merge,
      ),
    )
  }

  /** The operator's write of a gate's status, guarded like decideGate: two outcomes never both land. */
  patchGateStatus(gate: GateObject, status: NonNullable<GateObject["status"]>): Promise<GateObject | undefined> {
    const body = { metadata: { resourceVersion: gate.metadata?.resourceVersion }, status }
    return ifGone(
      this.#objects.patchNamespacedCustomObjectStatus(
        { ...this.#where("gates"), name: gate.metadata?.name ?? "", body },
        merge,
      ),
    )
  }

  /** Creates the CronJob, or replaces its spec when it differs (a Schedule's mirror in cronjob mode). */
  async putCronJob(cronJob: V1CronJob): Promise<void> {
    const name = cronJob.metadata?.name ?? ""
    const namespace = this.namespace
    const existing = await ifGone(this.#batch.readNamespacedCronJob({ name, namespace }))
    if (existing === undefined) {
      await this.#batch.createNamespacedCronJob({ namespace, body: cronJob })
      return
    }
    const wanted = {
      ...cronJob,
      metadata: { ...cronJob.metadata, resourceVersion: existing.metadata?.resourceVersion },
    }
    if (JSON.stringify(existing.spec) === JSON.stringify({ ...existing.spec, ...cronJob.spec })) return
    await this.#batch.replaceNamespacedCronJob({ name, namespace, body: wanted })
  }

  /** `false` when it was already gone. */
  async deleteCronJob(name: string): Promise<boolean> {
    return (await ifGone(this.#batch.deleteNamespacedCronJob({ name, namespace: this.namespace }))) !== undefined
  }

  /** Creates or replaces the core Secret that `pipeline.spec.webhookSecretRef` names, owned by the Pipeline; resolves with it as stored. */
  async putWebhookSecret(pipeline: PipelineObject, value: string): Promise<V1Secret> {
    const pipelineName = pipeline.metadata?.name ?? ""
    const ref = pipeline.spec.webhookSecretRef
    if (ref === undefined) throw new Error(`pipeline "${pipelineName}" names no webhook Secret`)
    const namespace = this.namespace
    const body: V1Secret = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: {
        name: ref.name,
        labels: { [pipelineLabel]: pipelineName },
        ownerReferences: [pipelineOwnerReference(pipeline)],
      },
      type: "Opaque",
      data: { [ref.key ?? defaultWebhookSecretKey]: Buffer.from(value, "utf8").toString("base64") },
    }
    const existing = await ifGone(this.#core.readNamespacedSecret({ name: ref.name, namespace }))
    if (existing === undefined) return this.#core.createNamespacedSecret({ namespace, body })
    body.metadata = { ...body.metadata, resourceVersion: existing.metadata?.resourceVersion }
    return this.#core.replaceNamespacedSecret({ name: ref.name, namespace, body })
  }

  /** `false` when it was already gone. */
  async deleteSecret(name: string): Promise<boolean> {
    return (await ifGone(this.#core.deleteNamespacedSecret({ name, namespace: this.namespace }))) !== undefined
  }

  /**
   * The webhook secret `pipeline.spec.webhookSecretRef` names; undefined when it
   * names none. A reference to a Secret or key that is missing fails closed (503).
   */
  async webhookSecret(pipeline: PipelineObject): Promise<string | undefined> {
    const ref = pipeline.spec.webhookSecretRef
    if (ref === undefined) return undefined
    const key = ref.key ?? defaultWebhookSecretKey
    const secret = await ifGone(this.#core.readNamespacedSecret({ name: ref.name, namespace: this.namespace }))
    const value = webhookSecretIn(pipeline, secret)
    if (value === undefined) {
      // Verifying without the secret would accept unsigned requests: refuse them all until it is back.
      throw new RunnelError(
        503,
        "webhook_secret_missing",
        `the webhook secret of pipeline "${pipeline.metadata?.name}" (Secret "${ref.name}", key "${key}") cannot be found; store it again with PUT /api/pipelines/${pipeline.metadata?.name} and "webhook_secret"`,
      )
    }
    return value
  }

  async #delete(plural: RunnelPlural, name: string, propagationPolicy?: "Background"): Promise<boolean> {
    const deleted = await ifGone(
      this.#objects.deleteNamespacedCustomObject({
        ...this.#where(plural),
        name,
        ...(propagationPolicy === undefined ? {} : { propagationPolicy }),
      }),
    )
    return deleted !== undefined
  }

  #where(plural: RunnelPlural) {
    return { group: runnelGroup, version: runnelVersion, namespace: this.namespace, plural }
  }
}

/** `call`'s result, or undefined when the Kubernetes API answers 404 (the object is gone). */
/** A 409 from the Kubernetes API: the object exists already, or changed since it was read. */
export const isConflict = (error: unknown) => error instanceof ApiException && error.code === 409

export async function ifGone<T>(call: Promise<T>): Promise<T | undefined> {
  try {
    return await call
  } catch (error) {
    if (error instanceof ApiException && error.code === 404) return undefined
    throw error
  }
}

/**
 * The value of `pipeline`'s webhook secret in `secret`, the Secret its
 * webhookSecretRef names; undefined when it names none, or `secret` is not
 * there or lacks the key.
 */
export function webhookSecretIn(pipeline: PipelineObject, secret: V1Secret | undefined): string | undefined {
  const ref = pipeline.spec.webhookSecretRef
  const data = ref === undefined ? undefined : secret?.data?.[ref.key ?? defaultWebhookSecretKey]
  return data === undefined ? undefined : Buffer.from(data, "base64").toString("utf8")
}
