import type { Log } from "../lib/core/log.ts"
import type { KubeConfig, KubernetesObject, V1Secret } from "../lib/kube/client-node.js"
import { startInformer } from "../lib/kube/informer.ts"
import { type ResourceClient, webhookSecretSelector } from "../lib/kube/resource-client.ts"
import type { GateObject, PipelineObject, RunnelPlural, RunObject } from "../lib/kube/resources.ts"

/**
 * The Pipelines and Runs of the namespace, kept current by list and watch, so
 * that a page of `GET /api/runs` costs a scan of memory instead of a list of
 * every Run from the Kubernetes API (100k Runs are tens of megabytes of JSON).
 * The API server's own writes are applied at once (`observe`, `forget`), so a
 * client reads what it has just written; writes by others arrive with the
 * watch, a few milliseconds later, as they would from any informer.
 *
 * The webhook Secrets runnel wrote are followed too, so that a delivery's
 * signature is checked without reading its Secret each time.
 */
export type ResourceIndex = {
  readonly pipelines: ObjectIndex<PipelineObject>
  readonly runs: RunIndex
  readonly webhookSecrets: ObjectIndex<V1Secret>
  stop(): Promise<void>
}

export type IndexHandlers<T> = {
  /** A change made by anyone, after the first list: the object before (undefined when new) and after. */
  changed?(before: T | undefined, after: T): void
  deleted?(object: T): void
}

export async function startResourceIndex(options: {
  kubeConfig: KubeConfig
  /** Lists and paths of the namespace the index follows. */
  client: Pick<ResourceClient, "namespace" | "path" | "list" | "secretsPath" | "listWebhookSecrets">
  log: Log
  /** Told of every Pipeline change after the first list (the audit of changes made with kubectl). */
  pipelineHandlers?: IndexHandlers<PipelineObject>
  /** Given (the `gates` feature on), Gates are followed too and every change after the first list told. */
  gateHandlers?: IndexHandlers<GateObject>
}): Promise<ResourceIndex> {
  const { kubeConfig, client, log } = options
  const pipelines = new ObjectIndex<PipelineObject>()
  const runs = new RunIndex()
  let listed = false
  const follow = async <T extends KubernetesObject>(
    plural: Extract<RunnelPlural, "pipelines" | "runs" | "gates">,
    index: ObjectIndex<T>,
    handlers?: IndexHandlers<T>,
  ) =>
    startInformer<T>({
      kubeConfig,
      namespace: client.namespace,
      path: client.path(plural),
      list: () => client.list<T>(plural),
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
  const webhookSecrets = new ObjectIndex<V1Secret>()
  const informers = await Promise.all([
    follow("pipelines", pipelines, options.pipelineHandlers),
    follow<RunObject>("runs", runs),
    startInformer<V1Secret>({
      kubeConfig,
      namespace: client.namespace,
      path: client.secretsPath(),
      list: () => client.listWebhookSecrets(),
      labelSelector: webhookSecretSelector,
      handlers: {
        changed: (secret) => webhookSecrets.observe(secret),
        deleted: (secret) => webhookSecrets.forget(secret),
      },
      log,
    }),
    ...(options.gateHandlers === undefined
      ? []
      : [follow("gates", new ObjectIndex<GateObject>(), options.gateHandlers)]),
  ])
  listed = true
  return {
    pipelines,
    runs,
    webhookSecrets,
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
  readonly #listeners = new Map<string, Set<(object: T | undefined) => void>>()

  /** Calls `listener` with each newer version of the object `name` (undefined once it is gone) until unsubscribed. */
  onChange(name: string, listener: (object: T | undefined) => void): () => void {
    const listeners = this.#listeners.get(name) ?? new Set()
    listeners.add(listener)
    this.#listeners.set(name, listeners)
    return () => {
      listeners.delete(listener)
      if (listeners.size === 0 && this.#listeners.get(name) === listeners) this.#listeners.delete(name)
    }
  }

  #notify(name: string, object: T | undefined): void {
    for (const listener of this.#listeners.get(name) ?? []) listener(object)
  }

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
    this.#notify(name, object)
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
    this.#notify(name, undefined)
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

/**
 * Runs, also in creation order (oldest first, ties by name), all of them and
 * per phase and per pipeline, so that a page newest first, with or without a
 * filter, and its total cost a binary search and a slice, not a scan.
 */
export class RunIndex extends ObjectIndex<RunObject> {
  readonly #all = new OrderedRuns()
  readonly #byPhase = new Map<string, OrderedRuns>()
  readonly #byPipeline = new Map<string, OrderedRuns>()

  /** One page of the Runs `filter` selects, newest first, and how many it selects in all. */
  page(filter: RunFilter, offset: number, count: number): { items: RunObject[]; total: number } {
    const byPhase = filter.status === undefined ? undefined : (this.#byPhase.get(filter.status) ?? empty)
    const byPipeline = filter.pipeline === undefined ? undefined : (this.#byPipeline.get(filter.pipeline) ?? empty)
    if (byPhase !== undefined && byPipeline !== undefined) {
      // Both: walk the shorter list, newest first, checking the other condition.
      const [walked, other] = byPhase.size <= byPipeline.size ? [byPhase, byPipeline] : [byPipeline, byPhase]
      const items: RunObject[] = []
      let total = 0
      for (const run of walked.newestFirst()) {
        if (!other.has(run)) continue
        if (total >= offset && items.length < count) items.push(run)
        total++
      }
      return { items, total }
    }
    const list = byPhase ?? byPipeline ?? this.#all
    return { items: list.newestSlice(offset, count), total: list.size }
  }

  /** Runs not yet started: the queue a trigger is admitted to. */
  queued(): number {
    return this.#byPhase.get("queued")?.size ?? 0
  }

  protected override added(before: RunObject | undefined, after: RunObject): void {
    if (before !== undefined) this.removed(before)
    this.#all.add(after)
    listOf(this.#byPhase, phaseOf(after)).add(after)
    listOf(this.#byPipeline, after.spec.pipelineRef.name).add(after)
  }

  protected override removed(run: RunObject): void {
    this.#all.remove(run)
    this.#byPhase.get(phaseOf(run))?.remove(run)
    this.#byPipeline.get(run.spec.pipelineRef.name)?.remove(run)
  }
}

const phaseOf = (run: RunObject) => run.status?.phase ?? "queued"

function listOf(lists: Map<string, OrderedRuns>, key: string): OrderedRuns {
  let list = lists.get(key)
  if (list === undefined) {
    list = new OrderedRuns()
    lists.set(key, list)
  }
  return list
}

/** Runs sorted by creation time, then name; one entry per run name. */
class OrderedRuns {
  readonly #runs: RunObject[] = []
  readonly #keys: string[] = []

  get size(): number {
    return this.#runs.length
  }

  add(run: RunObject): void {
    const key = sortKey(run)
    const at = this.#position(key)
    this.#runs.splice(at, 0, run)
    this.#keys.splice(at, 0, key)
  }

  remove(run: RunObject): void {
    const key = sortKey(run)
    const at = this.#position(key)
    if (this.#keys[at] !== key) return
    this.#runs.splice(at, 1)
    this.#keys.splice(at, 1)
  }

  has(run: RunObject): boolean {
    const key = sortKey(run)
    return this.#keys[this.#position(key)] === key
  }

  /** `count` runs from the `offset`-th newest. */
  newestSlice(offset: number, count: number): RunObject[] {
    const end = this.#runs.length - offset
    return end <= 0 ? [] : this.#runs.slice(Math.max(0, end - count), end).reverse()
  }

  *newestFirst(): Generator<RunObject> {
    for (let i = this.#runs.length - 1; i >= 0; i--) yield this.#runs[i] as RunObject
  }

  /** Where `key` is, or would go (binary search). */
  #position(key: string): number {
    let low = 0
    let high = this.#keys.length
    while (low < high) {
      const middle = (low + high) >>> 1
      if ((this.#keys[middle] as string) < key) low = middle + 1
      else high = middle
    }
    return low
  }
}

const empty = new OrderedRuns()

const sortKey = (run: RunObject) => `${String(run.metadata?.creationTimestamp ?? "")} ${run.metadata?.name ?? ""}`
