import {
  ApiException,
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesListObject,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node"
import type { PipelineObject, RunObject, RunStatusFields, ScheduleObject } from "./resources.ts"
import { pipelineLabel, runnelGroup, runnelVersion } from "./resources.ts"

const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch)

type Plural = "pipelines" | "runs" | "schedules"

/**
 * The calls the operator makes, in one namespace, through
 * `@kubernetes/client-node`: the same against the embedded API and a real
 * cluster. Writes are JSON merge patches (no resourceVersion): the operator
 * is the only writer of a status, and a patch never loses to a stale read.
 * A call on an object that is gone resolves `undefined`; every other failure rejects.
 */
export class ResourceClient {
  readonly namespace: string
  readonly #objects: CustomObjectsApi

  constructor(kubeConfig: KubeConfig, namespace: string) {
    this.namespace = namespace
    this.#objects = kubeConfig.makeApiClient(CustomObjectsApi)
  }

  /** `/apis/runnel.dev/v1alpha1/namespaces/NS/PLURAL`, the path informers watch. */
  path(plural: Plural): string {
    return `/apis/${runnelGroup}/${runnelVersion}/namespaces/${this.namespace}/${plural}`
  }

  list<T extends PipelineObject | RunObject>(plural: Plural): Promise<KubernetesListObject<T>> {
    return this.#objects.listNamespacedCustomObject({ ...this.#where(plural) })
  }

  getPipeline(name: string): Promise<PipelineObject | undefined> {
    return ifGone(this.#objects.getNamespacedCustomObject({ ...this.#where("pipelines"), name }))
  }

  patchPipelineStatus(name: string, status: PipelineObject["status"]): Promise<PipelineObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObjectStatus({ ...this.#where("pipelines"), name, body: { status } }, merge),
    )
  }

  patchRunStatus(name: string, status: RunStatusFields): Promise<RunObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObjectStatus({ ...this.#where("runs"), name, body: { status } }, merge),
    )
  }

  patchRunMetadata(name: string, metadata: NonNullable<RunObject["metadata"]>): Promise<RunObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObject({ ...this.#where("runs"), name, body: { metadata } }, merge),
    )
  }

  /**
   * A YAML run's set_pipeline: replaces the content of Pipeline `name`, or
   * creates it (driver and everything else at their defaults).
   */
  async setPipeline(name: string, yaml: string): Promise<void> {
    const spec = { content: yaml, contentType: "yaml" }
    const patched = await ifGone(
      this.#objects.patchNamespacedCustomObject({ ...this.#where("pipelines"), name, body: { spec } }, merge),
    )
    if (patched !== undefined) return
    await this.#objects.createNamespacedCustomObject({
      ...this.#where("pipelines"),
      body: { apiVersion: `${runnelGroup}/${runnelVersion}`, kind: "Pipeline", metadata: { name }, spec },
    })
  }

  /** The Schedules derived from one Pipeline (label `runnel.dev/pipeline`). */
  async listSchedules(pipeline: string): Promise<ScheduleObject[]> {
    const list = (await this.#objects.listNamespacedCustomObject({
      ...this.#where("schedules"),
      labelSelector: `${pipelineLabel}=${pipeline}`,
    })) as KubernetesListObject<ScheduleObject>
    return list.items
  }

  createSchedule(schedule: ScheduleObject): Promise<ScheduleObject> {
    return this.#objects.createNamespacedCustomObject({ ...this.#where("schedules"), body: schedule })
  }

  patchScheduleSpec(name: string, spec: Partial<ScheduleObject["spec"]>): Promise<ScheduleObject | undefined> {
    return ifGone(
      this.#objects.patchNamespacedCustomObject({ ...this.#where("schedules"), name, body: { spec } }, merge),
    )
  }

  async deleteSchedule(name: string): Promise<void> {
    await ifGone(this.#objects.deleteNamespacedCustomObject({ ...this.#where("schedules"), name }))
  }

  #where(plural: Plural) {
    return { group: runnelGroup, version: runnelVersion, namespace: this.namespace, plural }
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
