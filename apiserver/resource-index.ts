import type { KubeConfig, KubernetesListObject, KubernetesObject } from "@kubernetes/client-node"
import { CustomObjectsApi } from "@kubernetes/client-node"
import type { Log } from "../lib/core/log.ts"
import { startInformer } from "../lib/kube/informer.ts"
import type { PipelineResource, RunResource } from "./resources.ts"

/**
 * The Pipelines and Runs of the namespace, kept current by list and watch, so
 * that a page of `GET /api/runs` costs a scan of memory instead of a list of
 * every Run from the Kubernetes API (100k Runs are tens of megabytes of JSON).
 * The API server's own writes are applied at once (`observe`, `forget`), so a
 * client reads what it has just written; writes by others arrive with the
 * watch, a few milliseconds later, as they would from any informer.
 */
export type ResourceIndex = {
  readonly pipelines: ObjectIndex<PipelineResource>
  readonly runs: RunIndex
  stop(): Promise<void>
}

export type IndexHandlers<T> = {
  /** A change made by anyone, after the first list: the object before (undefined when new) and after. */
  changed?(before: T | undefined, after: T): void
  deleted?(object: T): void
}

export async function startResourceIndex(options: {
  kubeConfig: KubeConfig
  namespace: string
  log: Log
  /** Told of every Pipeline change after the first list (the audit of changes made with kubectl). */
  pipelineHandlers?: IndexHandlers<PipelineResource>
}): Promise<ResourceIndex> {
  const { kubeConfig, namespace, log } = options
  const objects = kubeConfig.makeApiClient(CustomObjectsApi)
  const pipelines = new ObjectIndex<PipelineResource>()
  const runs = new RunIndex()
  let listed = false
  const follow = async <T extends KubernetesObject>(
    plural: string,
    index: ObjectIndex<T>,
    handlers?: IndexHandlers<T>,
  ) =>
    startInformer<T>({
      kubeConfig,
      namespace,
      path: `/apis/runnel.dev/v1alpha1/namespaces/${namespace}/${plural}`,
      list: async () =>
        (await objects.listNamespacedCustomObject({
          group: "runnel.dev",
          version: "v1alpha1",
          namespace,
          plural,
        })) as KubernetesListObject<T>,
      handlers: {
        changed: (object) => {
          const before = index.get(object.metadata?.name ?? "")
          if (index.observe(object) && listed) handlers?.changed?.(before, object)
        },
        deleted: (object) => {
          if (index.forget(object) && listed) handlers?.deleted?.(object)
        },
      },
      log,
    })
  const informers = await Promise.all([
    follow("pipelines", pipelines, options.pipelineHandlers),
    follow<RunResource>("runs", runs),
  ])
  listed = true
  return {
    pipelines,
    runs,
    stop: async () => {
      await Promise.all(informers.map((informer) => informer.stop()))
    },
  }
}

/** Deleted objects remembered so that a late event about one does not bring it back. */
const tombstoneLimit = 10_000

/** Objects of one kind by name, each the newest version seen from the watch or from this server's writes. */
export class ObjectIndex<T extends KubernetesObject> {
  readonly #byName = new Map<string, T>()
  readonly #tombstones = new Set<string>()

  get(name: string): T | undefined {
    return this.#byName.get(name)
  }

  list(): T[] {
    return [...this.#byName.values()]
  }

  find(match: (object: T) => boolean): T | undefined {
    for (const object of this.#byName.values()) if (match(object)) return object
    return undefined
  }

  /** Keeps `object` unless a newer version is already here; true when it was kept. */
  observe(object: T): boolean {
    const { name = "", uid = "" } = object.metadata ?? {}
    if (this.#tombstones.has(uid)) return false
    const current = this.#byName.get(name)
    if (current !== undefined && current.metadata?.uid === uid && !newer(object, current)) return false
    this.#byName.set(name, object)
    this.added(current, object)
    return true
  }

  /** Drops `object` (this exact one: a newer object of the same name stays); true when it was here. */
  forget(object: T): boolean {
    const { name = "", uid = "" } = object.metadata ?? {}
    this.#tombstones.add(uid)
    if (this.#tombstones.size > tombstoneLimit) {
      const [oldest] = this.#tombstones
      if (oldest !== undefined) this.#tombstones.delete(oldest)
    }
    const current = this.#byName.get(name)
    if (current === undefined || current.metadata?.uid !== uid) return false
    this.#byName.delete(name)
    this.removed(current)
    return true
  }

  /** Subclasses keep their own orderings in step. */
  protected added(_before: T | undefined, _after: T): void {}
  protected removed(_object: T): void {}
}

/** Kubernetes resourceVersions are opaque, but a cluster's and the embedded API's are increasing integers. */
function newer(candidate: KubernetesObject, current: KubernetesObject): boolean {
  const a = candidate.metadata?.resourceVersion ?? ""
  const b = current.metadata?.resourceVersion ?? ""
  if (!/^\d+$/.test(a) || !/^\d+$/.test(b)) return a !== b
  return BigInt(a) > BigInt(b)
}

export type RunFilter = { status?: string; pipeline?: string }

/** Runs, also in creation order (oldest first, ties by name) for pages newest first. */
export class RunIndex extends ObjectIndex<RunResource> {
  readonly #order: RunResource[] = []

  /** One page of the Runs `filter` selects, newest first, and how many it selects in all. */
  page(filter: RunFilter, offset: number, count: number): { items: RunResource[]; total: number } {
    const items: RunResource[] = []
    let total = 0
    for (let i = this.#order.length - 1; i >= 0; i--) {
      const run = this.#order[i] as RunResource
      if (filter.status !== undefined && (run.status?.phase ?? "queued") !== filter.status) continue
      if (filter.pipeline !== undefined && run.spec.pipelineRef.name !== filter.pipeline) continue
      if (total >= offset && items.length < count) items.push(run)
      total++
    }
    return { items, total }
  }

  /** Runs not yet started: the queue a trigger is admitted to. */
  queued(): number {
    let count = 0
    for (const run of this.#order) if ((run.status?.phase ?? "queued") === "queued") count++
    return count
  }

  protected override added(before: RunResource | undefined, after: RunResource): void {
    if (before !== undefined) this.#order.splice(this.#position(before), 1)
    this.#order.splice(this.#position(after), 0, after)
  }

  protected override removed(run: RunResource): void {
    this.#order.splice(this.#position(run), 1)
  }

  /** Where `run` is, or would go, in #order (binary search on creation time, then name). */
  #position(run: RunResource): number {
    const key = sortKey(run)
    let low = 0
    let high = this.#order.length
    while (low < high) {
      const middle = (low + high) >>> 1
      if (sortKey(this.#order[middle] as RunResource) < key) low = middle + 1
      else high = middle
    }
    return low
  }
}

const sortKey = (run: RunResource) => `${String(run.metadata?.creationTimestamp ?? "")} ${run.metadata?.name ?? ""}`
