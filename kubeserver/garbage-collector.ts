import { KubeStatusError } from "./kube-status.ts"
import type { KubeObject } from "./object-meta.ts"
import type { ObjectKey, StoredEvent } from "./object-store.ts"
import type { PropagationPolicy, ResourceApi } from "./resource-api.ts"
import { gcFinalizers } from "./resource-api.ts"
import type { ResourceType } from "./resource-types.ts"
import { namespaceType, storageResource } from "./resource-types.ts"

type Task =
  | { kind: "item"; key: ObjectKey }
  | { kind: "owner-gone"; uid: string }
  | { kind: "owner"; uid: string }
  | { kind: "foreground"; key: ObjectKey }
  | { kind: "orphan"; key: ObjectKey }
  | { kind: "namespace"; name: string }

const taskId = (task: Task) =>
  "key" in task
    ? `${task.kind}:${task.key.resource}/${task.key.namespace}/${task.key.name}`
    : "uid" in task
      ? `${task.kind}:${task.uid}`
      : `${task.kind}:${task.name}`

const sameReferences = (references: unknown[], before: unknown[] | undefined) =>
  JSON.stringify(references) === JSON.stringify(before ?? [])
const has = (object: KubeObject, finalizer: string) => (object.metadata.finalizers ?? []).includes(finalizer)
const deletingDependents = (object: KubeObject) =>
  object.metadata.deletionTimestamp !== undefined && has(object, gcFinalizers.foreground)

/**
 * Kubernetes' garbage collector and namespace cleanup, for one store:
 * - an object all of whose owners are gone is deleted (Background, or by its own orphan/foreground finalizer);
 *   owners that are gone are removed from an object that still has a live owner;
 * - an owner deleted in the foreground keeps its `foregroundDeletion` finalizer until every dependent that
 *   blocks it (`blockOwnerDeletion: true`) is gone; its dependents are deleted first;
 * - an owner deleted with Orphan loses its `orphan` finalizer once its dependents no longer name it;
 * - a Terminating namespace is removed once everything in it has been deleted.
 * It reacts to the store's events and works asynchronously, as the real controller does; `idle()` resolves when
 * nothing is left to do. Owners are found by uid, so an owner recreated under the same name is a different owner.
 */
export class GarbageCollector {
  #api: ResourceApi
  #queue = new Map<string, Task>()
  #running = false
  #closed = false
  #idle: (() => void)[] = []
  #unsubscribe: () => void
  #byResource: Map<string, ResourceType>

  constructor(api: ResourceApi) {
    this.#api = api
    this.#byResource = new Map(api.types.all.map((type) => [storageResource(type), type]))
    this.#unsubscribe = api.store.subscribe((event) => this.#observe(event))
    this.#resync()
  }

  /** Resolves once the queue is empty. */
  idle(): Promise<void> {
    if (!this.#running && this.#queue.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.#idle.push(resolve))
  }

  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#unsubscribe()
    this.#queue.clear()
    for (const resolve of this.#idle.splice(0)) resolve()
  }

  /** After a restart: finds the work the events would have announced. */
  #resync() {
    for (const type of this.#api.types.all) {
      for (const object of this.#api.store.list(storageResource(type), undefined)) {
        this.#observe({ type: "ADDED", version: 0, ...keyOf(type, object), object, previous: undefined })
      }
    }
  }

  #observe(event: StoredEvent) {
    const object = event.object
    const key = { resource: event.resource, namespace: event.namespace, name: event.name }
    const references = object.metadata.ownerReferences ?? []
    if (event.type === "DELETED") {
      if (object.metadata.uid !== undefined) this.#enqueue({ kind: "owner-gone", uid: object.metadata.uid })
      for (const reference of references) this.#enqueue({ kind: "owner", uid: reference.uid })
      if (event.namespace !== "") this.#enqueue({ kind: "namespace", name: event.namespace })
      return
    }
    if (object.metadata.deletionTimestamp !== undefined) {
      if (event.resource === storageResource(namespaceType)) this.#enqueue({ kind: "namespace", name: event.name })
      if (has(object, gcFinalizers.foreground)) this.#enqueue({ kind: "foreground", key })
      if (has(object, gcFinalizers.orphan)) this.#enqueue({ kind: "orphan", key })
    }
    // An object's owners are judged when it appears or its references change; an owner that goes later is
    // found by its "owner-gone" task. Not on every other write: a Run's status writes would each read it and
    // its Pipeline back.
    const judged = event.previous !== undefined && sameReferences(references, event.previous.metadata.ownerReferences)
    if (references.length > 0 && !judged) this.#enqueue({ kind: "item", key })
    // A dependent that stopped blocking (or stopped naming) an owner may let that owner's foreground deletion finish.
    for (const reference of event.previous?.metadata.ownerReferences ?? []) {
      if (reference.blockOwnerDeletion === true) this.#enqueue({ kind: "owner", uid: reference.uid })
    }
  }

  #enqueue(task: Task) {
    if (this.#closed) return
    this.#queue.set(taskId(task), task)
    if (!this.#running) {
      this.#running = true
      setImmediate(() => this.#drain())
    }
  }

  #drain() {
    let budget = 200
    while (!this.#closed && this.#queue.size > 0 && budget-- > 0) {
      const [id, task] = this.#queue.entries().next().value as [string, Task]
      this.#queue.delete(id)
      try {
        this.#run(task)
      } catch (error) {
        // A conflict or a vanished object means the world moved on; its own event brings the task back.
        if (!(error instanceof KubeStatusError)) throw error
      }
    }
    if (!this.#closed && this.#queue.size > 0) {
      setImmediate(() => this.#drain())
      return
    }
    this.#running = false
    for (const resolve of this.#idle.splice(0)) resolve()
  }

  #run(task: Task) {
    switch (task.kind) {
      case "item":
        return this.#attemptToDelete(task.key)
      case "owner-gone":
        for (const key of this.#api.store.dependents(task.uid)) this.#attemptToDelete(key)
        return
      case "owner": {
        const owner = this.#api.store.getByUid(task.uid)
        if (owner !== undefined && deletingDependents(owner.object)) {
          this.#foreground(keyOf(this.#type(owner.resource), owner.object))
        }
        return
      }
      case "foreground":
        return this.#foreground(task.key)
      case "orphan":
        return this.#orphan(task.key)
      case "namespace":
        return this.#namespace(task.name)
    }
  }

  #type(resource: string): ResourceType {
    const type = this.#byResource.get(resource)
    if (type === undefined) throw new Error(`the garbage collector met an object of unknown resource ${resource}`)
    return type
  }

  #get(key: ObjectKey) {
    return this.#api.store.get(key)
  }

  #delete(key: ObjectKey, policy: PropagationPolicy) {
    const type = this.#type(key.resource)
    try {
      this.#api.delete(type, key.namespace || undefined, key.name, { propagationPolicy: policy })
    } catch (error) {
      if (!(error instanceof KubeStatusError && error.code === 404)) throw error
    }
  }

  #attemptToDelete(key: ObjectKey) {
    const item = this.#get(key)
    if (item === undefined || item.metadata.deletionTimestamp !== undefined) return
    const references = item.metadata.ownerReferences ?? []
    if (references.length === 0) return
    const dangling: string[] = []
    const waiting: string[] = []
    let solid = 0
    for (const reference of references) {
      const owner = this.#api.store.getByUid(reference.uid)
      if (owner === undefined || owner.object.kind !== reference.kind) dangling.push(reference.uid)
      else if (deletingDependents(owner.object)) waiting.push(reference.uid)
      else solid++
    }
    if (solid > 0) {
      if (dangling.length === 0 && waiting.length === 0) return
      // Keep the object for its live owners; forget the gone ones and stop blocking the ones being deleted.
      this.#api.updateMetadata(this.#type(key.resource), key.namespace || undefined, key.name, (meta) => {
        meta.ownerReferences = (meta.ownerReferences ?? [])
          .filter((reference) => !dangling.includes(reference.uid))
          .map((reference) =>
            waiting.includes(reference.uid) ? { ...reference, blockOwnerDeletion: false } : reference,
          )
      })
      return
    }
    if (
      waiting.length > 0 &&
      item.metadata.uid !== undefined &&
      this.#api.store.dependents(item.metadata.uid).length > 0
    ) {
      return this.#delete(key, "Foreground")
    }
    if (dangling.length === 0 && waiting.length === 0) return
    const policy = has(item, gcFinalizers.orphan)
      ? "Orphan"
      : has(item, gcFinalizers.foreground)
        ? "Foreground"
        : "Background"
    this.#delete(key, policy)
  }

  #foreground(key: ObjectKey) {
    const owner = this.#get(key)
    if (owner === undefined || !deletingDependents(owner)) return
    const uid = owner.metadata.uid ?? ""
    const dependents = this.#api.store.dependents(uid).flatMap((dependentKey) => {
      const dependent = this.#get(dependentKey)
      return dependent === undefined ? [] : [{ key: dependentKey, dependent }]
    })
    const blocking = dependents.filter(({ dependent }) =>
      (dependent.metadata.ownerReferences ?? []).some(
        (reference) => reference.uid === uid && reference.blockOwnerDeletion === true,
      ),
    )
    if (blocking.length === 0) {
      this.#api.updateMetadata(this.#type(key.resource), key.namespace || undefined, key.name, (meta) => {
        meta.finalizers = (meta.finalizers ?? []).filter((finalizer) => finalizer !== gcFinalizers.foreground)
      })
      return
    }
    for (const { key: dependentKey } of dependents) this.#attemptToDelete(dependentKey)
  }

  #orphan(key: ObjectKey) {
    const owner = this.#get(key)
    if (owner === undefined || owner.metadata.deletionTimestamp === undefined || !has(owner, gcFinalizers.orphan))
      return
    const uid = owner.metadata.uid ?? ""
    for (const dependent of this.#api.store.dependents(uid)) {
      this.#api.updateMetadata(
        this.#type(dependent.resource),
        dependent.namespace || undefined,
        dependent.name,
        (meta) => {
          meta.ownerReferences = (meta.ownerReferences ?? []).filter((reference) => reference.uid !== uid)
          if (meta.ownerReferences.length === 0) delete meta.ownerReferences
        },
      )
    }
    this.#api.updateMetadata(this.#type(key.resource), key.namespace || undefined, key.name, (meta) => {
      meta.finalizers = (meta.finalizers ?? []).filter((finalizer) => finalizer !== gcFinalizers.orphan)
    })
  }

  #namespace(name: string) {
    const store = this.#api.store
    const holder = store.get({ resource: storageResource(namespaceType), namespace: "", name })
    if (holder === undefined || holder.metadata.deletionTimestamp === undefined) return
    let remaining = 0
    for (const type of this.#api.types.all.filter((candidate) => candidate.namespaced)) {
      for (const object of [...store.list(storageResource(type), name)]) {
        remaining++
        if (object.metadata.deletionTimestamp === undefined) this.#delete({ ...keyOf(type, object) }, "Background")
      }
    }
    if (remaining === 0) store.remove(storageResource(namespaceType), holder)
  }
}

const keyOf = (type: ResourceType, object: KubeObject): ObjectKey => ({
  resource: storageResource(type),
  namespace: object.metadata.namespace ?? "",
  name: object.metadata.name ?? "",
})
