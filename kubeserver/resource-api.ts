import { randomInt, randomUUID } from "node:crypto"
import type { FieldError, GroupKind, GroupResource, KubeStatus } from "./kube-status.ts"
import {
  alreadyExists,
  badRequest,
  conflict,
  expired,
  fieldForbidden,
  fieldInvalid,
  forbidden,
  invalid,
  KubeStatusError,
  notFound,
  staleResourceVersionMessage,
  unsupportedMediaType,
} from "./kube-status.ts"
import type { KubeObject, ObjectMeta } from "./object-meta.ts"
import { metadataErrors, newFinalizerErrors, pruneMetadata } from "./object-meta.ts"
import type { ObjectStore, StoredEvent } from "./object-store.ts"
import { VersionExpiredError } from "./object-store.ts"
import { jsonPatch, mergePatch, PatchError, strategicMergePatch } from "./patches.ts"
import { defaultPodRequests, podResourceErrors } from "./pod-resources.ts"
import type { ResourceType, ResourceTypes } from "./resource-types.ts"
import { namespaceType, persistentVolumeClaimType, podType, secretType, storageResource } from "./resource-types.ts"
import type { JsonObject, JsonSchema } from "./schema.ts"
import { applyDefaults, canonical, deepEqual, isObject, pruneUnknownFields, validateSchema } from "./schema.ts"
import type { FieldSelector, LabelSelector } from "./selectors.ts"
import { fieldsMatch, labelsMatch, parseFieldSelector, parseLabelSelector, SelectorError } from "./selectors.ts"

export type FieldValidation = "Strict" | "Warn" | "Ignore"

export type WriteOptions = {
  /** What to do with fields the schema does not know: refuse (Strict), drop with a warning (Warn, the default), drop (Ignore). */
  readonly fieldValidation?: FieldValidation
  /** Validate and answer as if written, without writing. */
  readonly dryRun?: boolean
  /** Who writes, recorded in the author annotation when the API has one (ResourceApiOptions.authorAnnotation). */
  readonly author?: string | undefined
}

export type WriteResult = { readonly object: KubeObject; readonly warnings: readonly string[] }

export type ListQuery = {
  readonly labelSelector?: string
  readonly fieldSelector?: string
  readonly limit?: number
  readonly continue?: string
  readonly resourceVersion?: string
  readonly resourceVersionMatch?: string
}

export type KubeList = {
  apiVersion: string
  kind: string
  metadata: { resourceVersion: string; continue?: string; remainingItemCount?: number }
  items: KubeObject[]
}

export type PropagationPolicy = "Background" | "Foreground" | "Orphan"

export type DeleteOptions = {
  readonly propagationPolicy?: string
  readonly orphanDependents?: boolean
  readonly preconditions?: { readonly uid?: string; readonly resourceVersion?: string }
  readonly dryRun?: boolean
  /** Pods only: how long the kubelet lets the containers stop; the Pod's terminationGracePeriodSeconds when absent. */
  readonly gracePeriodSeconds?: number
}

export type PatchType = "json" | "merge" | "strategic" | "apply"

export const patchContentTypes: Record<string, PatchType> = {
  "application/json-patch+json": "json",
  "application/merge-patch+json": "merge",
  "application/strategic-merge-patch+json": "strategic",
  "application/apply-patch+yaml": "apply",
  "application/apply-patch+cbor": "apply",
}

export type WatchQuery = {
  readonly resourceVersion?: string
  readonly resourceVersionMatch?: string
  readonly labelSelector?: string
  readonly fieldSelector?: string
  readonly allowWatchBookmarks?: boolean
  readonly sendInitialEvents?: boolean
  readonly timeoutSeconds?: number
}

export type WatchEvent =
  | { readonly type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK"; readonly object: KubeObject }
  | { readonly type: "ERROR"; readonly object: KubeStatus }

/** Where a watch delivers: events in order, then `end` once (after an ERROR, a timeout or stop()). */
export type WatchSink = { event(event: WatchEvent): void; end(): void }

export type ResourceApiOptions = {
  readonly store: ObjectStore
  readonly types: ResourceTypes
  /** How often a watch that allows bookmarks gets one. Kubernetes sends one about every minute. */
  readonly bookmarkIntervalMs?: number
  readonly now?: () => Date
  /** The annotation every write of an object but a status write sets to its author, or removes when it has none. */
  readonly authorAnnotation?: string | undefined
}

/** Namespaces that exist from the start and cannot be deleted. */
export const systemNamespaces = ["default", "kube-system", "kube-public"] as const

export const gcFinalizers = { orphan: "orphan", foreground: "foregroundDeletion" } as const

const groupResource = (type: ResourceType): GroupResource => ({ group: type.group, resource: type.plural })
const groupKind = (type: ResourceType): GroupKind => ({ group: type.group, kind: type.kind })
const timestamp = (date: Date) => date.toISOString().replace(/\.\d+Z$/, "Z")
const generatedNameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

/**
 * Kubernetes' rules for reading and writing objects, on top of an ObjectStore:
 * the verbs of the REST API, in process. The HTTP handler translates requests
 * into these calls; the garbage collector uses them too. Every refusal is a
 * KubeStatusError carrying the Status a real API server would answer with.
 */
export class ResourceApi {
  readonly store: ObjectStore
  readonly types: ResourceTypes
  #bookmarkIntervalMs: number
  #now: () => Date
  #authorAnnotation: string | undefined

  constructor(options: ResourceApiOptions) {
    this.store = options.store
    this.types = options.types
    this.#bookmarkIntervalMs = options.bookmarkIntervalMs ?? 60_000
    this.#now = options.now ?? (() => new Date())
    this.#authorAnnotation = options.authorAnnotation
    for (const name of systemNamespaces) {
      if (this.store.get({ resource: storageResource(namespaceType), namespace: "", name }) === undefined) {
        this.create(namespaceType, undefined, { metadata: { name } })
      }
    }
  }

  get(type: ResourceType, namespace: string | undefined, name: string): KubeObject {
    const object = this.store.get(this.#key(type, namespace, name))
    if (object === undefined) throw notFound(groupResource(type), name)
    return object
  }

  list(type: ResourceType, namespace: string | undefined, query: ListQuery = {}): KubeList {
    const { labels, fields } = this.#selectors(type, query)
    let atVersion: number | undefined
    let after: { namespace: string; name: string } | undefined
    if (query.continue !== undefined && query.continue !== "") {
      if (query.resourceVersion !== undefined && query.resourceVersion !== "" && query.resourceVersion !== "0") {
        throw badRequest("specifying resource version is not allowed when using continue")
      }
      const token = decodeContinue(query.continue)
      atVersion = token.version
      after = { namespace: token.namespace, name: token.name }
      if (atVersion < this.store.compactedVersion) {
        throw expired(
          "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        )
      }
    } else if (query.resourceVersionMatch === "Exact") {
      atVersion = parseVersion(query.resourceVersion)
    }
    const version = atVersion ?? this.store.version
    const limit = query.limit !== undefined && query.limit > 0 ? query.limit : Number.POSITIVE_INFINITY
    const items: KubeObject[] = []
    let more = false
    try {
      for (const object of this.store.list(storageResource(type), namespace, { after, atVersion })) {
        if (!matches(type, object, labels, fields)) continue
        if (items.length === limit) {
          more = true
          break
        }
        items.push(object)
      }
    } catch (error) {
      if (error instanceof VersionExpiredError) throw expired(error.message)
      throw error
    }
    const metadata: KubeList["metadata"] = { resourceVersion: String(version) }
    const last = items[items.length - 1]
    if (more && last !== undefined) {
      const lastKey = { namespace: last.metadata.namespace ?? "", name: last.metadata.name ?? "" }
      metadata.continue = encodeContinue({ version, ...lastKey })
      if (labels.length === 0 && fields.length === 0) {
        metadata.remainingItemCount = this.store.countAfter(storageResource(type), namespace, lastKey)
      }
    }
    return { apiVersion: type.apiVersion, kind: type.listKind, metadata, items }
  }

  create(type: ResourceType, namespace: string | undefined, body: unknown, options: WriteOptions = {}): WriteResult {
    const object = this.#decode(type, body)
    const meta = object.metadata
    if (type.namespaced) {
      if (namespace === undefined) throw badRequest("the namespace of the object must be given in the request path")
      if (meta.namespace !== undefined && meta.namespace !== "" && meta.namespace !== namespace) {
        throw badRequest("the namespace of the provided object does not match the namespace sent on the request")
      }
      meta.namespace = namespace
    } else {
      delete meta.namespace
    }
    const warnings = this.#pruneUnknown(type, object, options)
    if ((meta.name === undefined || meta.name === "") && meta.generateName !== undefined && meta.generateName !== "") {
      meta.name = this.#generateName(type, namespace, meta.generateName)
    }
    const name = meta.name ?? ""
    if (type.namespaced && namespace !== undefined) this.#checkNamespaceOpen(type, name, namespace)
    for (const field of [
      "resourceVersion",
      "deletionTimestamp",
      "deletionGracePeriodSeconds",
      "selfLink",
      "managedFields",
    ] as const) {
      delete meta[field]
    }
    this.#recordAuthor(object, options.author)
    meta.uid = randomUUID()
    meta.creationTimestamp = timestamp(this.#now())
    if (type.custom) meta.generation = 1
    else delete meta.generation
    if (type.statusSubresource && type.custom) delete object.status
    if (type === namespaceType) object.status = { phase: "Active" }
    // As Kubernetes' strategies: a new Pod or claim is Pending whatever status it was sent with.
    if (type === podType || type === persistentVolumeClaimType) object.status = { phase: "Pending" }
    if (type === secretType) normaliseSecret(object)
    if (type === podType) defaultPodRequests(object.spec)
    applyDefaults(object, type.schema)
    this.#validate(type, object, undefined)
    if (this.store.get(this.#key(type, namespace, name)) !== undefined) throw alreadyExists(groupResource(type), name)
    const final = canonical(object)
    if (options.dryRun === true) return { object: final, warnings }
    return { object: this.store.create(storageResource(type), final), warnings }
  }

  /** PUT: replaces the object (or, with subresource "status", only its status). */
  update(
    type: ResourceType,
    namespace: string | undefined,
    name: string,
    body: unknown,
    options: WriteOptions & { subresource?: "status" } = {},
  ): WriteResult {
    const old = this.get(type, namespace, name)
    const object = this.#decode(type, body)
    const given = object.metadata.resourceVersion
    if (given === undefined || given === "") {
      if (type.custom) {
        throw invalid(groupKind(type), name, [
          {
            reason: "FieldValueInvalid",
            field: "metadata.resourceVersion",
            message: "Invalid value: 0x0: must be specified for an update",
          },
        ])
      }
      object.metadata.resourceVersion = old.metadata.resourceVersion
    }
    return this.#commit(type, old, object, options)
  }

  /** PATCH in one of Kubernetes' patch formats; `contentType` is the request's media type. */
  patch(
    type: ResourceType,
    namespace: string | undefined,
    name: string,
    contentType: string,
    patch: unknown,
    options: WriteOptions & { subresource?: "status" } = {},
  ): WriteResult {
    const patchType = patchContentTypes[contentType]
    const accepted = type.custom
      ? ["application/json-patch+json", "application/merge-patch+json"]
      : ["application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"]
    if (patchType === undefined || patchType === "apply" || (patchType === "strategic" && type.custom)) {
      throw unsupportedMediaType(contentType, accepted)
    }
    const old = this.get(type, namespace, name)
    let patched: unknown
    try {
      if (patchType === "json") patched = jsonPatch(old, patch)
      else if (!isObject(patch)) throw new PatchError(400, "a merge patch must be a JSON object")
      else if (patchType === "merge") patched = mergePatch(old, patch)
      else patched = strategicMergePatch(old, patch)
    } catch (error) {
      if (!(error instanceof PatchError)) throw error
      if (error.status === 400) throw badRequest(error.message)
      throw new KubeStatusError(422, "Invalid", error.message)
    }
    // A JSON patch works on its own copy; a status write keeps only the patched status, whose merge made
    // new objects where it changed and shares the rest with `old`, this request's own parse of the stored
    // object. Otherwise a merge patch shares parts with `old` that the write's strategy changes in place.
    const object = this.#decode(type, patched, patchType === "json" || options.subresource === "status")
    // A patch is unconditional unless it names a resourceVersion itself.
    if (object.metadata.resourceVersion === undefined) object.metadata.resourceVersion = old.metadata.resourceVersion
    return this.#commit(type, old, object, options)
  }

  /** DELETE; `author` is recorded on the object's last state (what its watchers see deleted). */
  delete(
    type: ResourceType,
    namespace: string | undefined,
    name: string,
    options: DeleteOptions = {},
    author?: string,
  ) {
    const old = this.#recordAuthor(this.get(type, namespace, name), author)
    const policy = propagationPolicy(options)
    const { uid, resourceVersion } = options.preconditions ?? {}
    if (uid !== undefined && uid !== old.metadata.uid) {
      throw conflict(
        groupResource(type),
        name,
        `Precondition failed: UID in precondition: ${uid}, UID in object meta: ${old.metadata.uid}`,
      )
    }
    if (resourceVersion !== undefined && resourceVersion !== old.metadata.resourceVersion) {
      throw conflict(
        groupResource(type),
        name,
        `Precondition failed: ResourceVersion in precondition: ${resourceVersion}, ResourceVersion in object meta: ${old.metadata.resourceVersion}`,
      )
    }
    if (type === namespaceType && (systemNamespaces as readonly string[]).includes(name)) {
      throw new KubeStatusError(
        403,
        "Forbidden",
        `namespaces "${name}" is forbidden: this namespace may not be deleted`,
        {
          name,
          kind: "namespaces",
        },
      )
    }
    const finalizers = (old.metadata.finalizers ?? []).filter(
      (finalizer) =>
        policy !== "Background" || (finalizer !== gcFinalizers.orphan && finalizer !== gcFinalizers.foreground),
    )
    if (policy === "Orphan" && !finalizers.includes(gcFinalizers.orphan)) finalizers.push(gcFinalizers.orphan)
    if (policy === "Foreground" && !finalizers.includes(gcFinalizers.foreground))
      finalizers.push(gcFinalizers.foreground)
    if (options.dryRun === true) return { object: old, deleted: false }
    const resource = storageResource(type)
    if (type === namespaceType) {
      // The namespace stays Terminating until the garbage collector has deleted what it holds.
      if (old.metadata.deletionTimestamp !== undefined) return { object: old, deleted: false }
      const terminating = canonical({
        ...old,
        metadata: { ...old.metadata, deletionTimestamp: timestamp(this.#now()), deletionGracePeriodSeconds: 0 },
        status: { phase: "Terminating" },
      })
      return { object: this.store.update(resource, terminating), deleted: false }
    }
    if (type === podType) {
      const grace = podGracePeriod(old, options)
      if (grace > 0) return { object: this.#deleteGracefully(old, finalizers, grace), deleted: false }
      if (finalizers.length === 0) return { object: this.store.remove(resource, old), deleted: true }
    }
    if (old.metadata.deletionTimestamp !== undefined) {
      if (deepEqual(finalizers, old.metadata.finalizers ?? [])) return { object: old, deleted: false }
      return { object: this.store.update(resource, canonical(withFinalizers(old, finalizers))), deleted: false }
    }
    if (finalizers.length > 0) {
      const pending = withFinalizers(old, finalizers)
      pending.metadata.deletionTimestamp = timestamp(this.#now())
      pending.metadata.deletionGracePeriodSeconds = 0
      return { object: this.store.update(resource, canonical(pending)), deleted: false }
    }
    return { object: this.store.remove(resource, old), deleted: true }
  }

  /**
   * A running Pod is not removed at once: it gets `deletionTimestamp` (now plus the grace period) and
   * `deletionGracePeriodSeconds`, the kubelet stops its containers within that time and then deletes it
   * with a grace period of 0. A second delete may shorten the grace period, never lengthen it.
   */
  #deleteGracefully(old: KubeObject, finalizers: string[], grace: number): KubeObject {
    const current = old.metadata.deletionGracePeriodSeconds
    if (current !== undefined && current <= grace && deepEqual(finalizers, old.metadata.finalizers ?? [])) return old
    const pending = withFinalizers(old, finalizers)
    const seconds = current === undefined ? grace : Math.min(current, grace)
    pending.metadata.deletionGracePeriodSeconds = seconds
    pending.metadata.deletionTimestamp = timestamp(new Date(this.#now().getTime() + seconds * 1000))
    return this.store.update(storageResource(podType), canonical(pending))
  }

  /** DELETE on a collection: deletes every object the query selects; answers with the list of them as they were. */
  deleteCollection(
    type: ResourceType,
    namespace: string | undefined,
    query: ListQuery,
    options: DeleteOptions = {},
    author?: string,
  ): KubeList {
    const list = this.list(type, namespace, { ...query, limit: undefined, continue: undefined })
    for (const item of list.items) {
      try {
        this.delete(type, item.metadata.namespace, item.metadata.name ?? "", options, author)
      } catch (error) {
        if (!(error instanceof KubeStatusError && error.code === 404)) throw error
      }
    }
    return list
  }

  /** Starts a watch; returns a function that stops it (idempotent; `sink.end` is called once either way). */
  watch(type: ResourceType, namespace: string | undefined, query: WatchQuery, sink: WatchSink): () => void {
    const { labels, fields } = this.#selectors(type, query)
    const resource = storageResource(type)
    let stopped = false
    const timers: NodeJS.Timeout[] = []
    let unsubscribe = () => {}
    const stop = () => {
      if (stopped) return
      stopped = true
      unsubscribe()
      for (const timer of timers) clearTimeout(timer)
      sink.end()
    }
    const deliver = (event: StoredEvent) => {
      if (stopped || event.resource !== resource) return
      if (namespace !== undefined && event.namespace !== namespace) return
      const now = matches(type, event.object, labels, fields)
      const before =
        event.previous !== undefined && event.type !== "ADDED" && matches(type, event.previous, labels, fields)
      if (event.type === "DELETED") {
        if (before || now) sink.event({ type: "DELETED", object: event.object })
      } else if (now && before) sink.event({ type: "MODIFIED", object: event.object })
      else if (now) sink.event({ type: "ADDED", object: event.object })
      else if (before) sink.event({ type: "DELETED", object: event.object })
    }
    const requested = query.resourceVersion
    const fromNow = requested === undefined || requested === "" || requested === "0" || query.sendInitialEvents === true
    let history: StoredEvent[] = []
    if (!fromNow) {
      const from = parseVersion(requested)
      try {
        history = this.store.eventsSince(resource, namespace, from)
      } catch (error) {
        if (!(error instanceof VersionExpiredError)) throw error
        // As Kubernetes: the watch is accepted, then ends with an ERROR event carrying 410 Expired.
        sink.event({ type: "ERROR", object: expired(error.message).toStatus() })
        stop()
        return stop
      }
    }
    const initial = fromNow
      ? this.list(type, namespace, { labelSelector: query.labelSelector, fieldSelector: query.fieldSelector }).items
      : []
    unsubscribe = this.store.subscribe(deliver)
    for (const object of initial) sink.event({ type: "ADDED", object })
    if (query.sendInitialEvents === true && query.allowWatchBookmarks === true) {
      sink.event({ type: "BOOKMARK", object: this.#bookmark(type, { "k8s.io/initial-events-end": "true" }) })
    }
    for (const event of history) deliver(event)
    if (query.allowWatchBookmarks === true) {
      const tick = () => {
        if (stopped) return
        sink.event({ type: "BOOKMARK", object: this.#bookmark(type) })
        timers[0] = setTimeout(tick, this.#bookmarkIntervalMs)
      }
      timers[0] = setTimeout(tick, this.#bookmarkIntervalMs)
    }
    if (query.timeoutSeconds !== undefined && query.timeoutSeconds > 0)
      timers[1] = setTimeout(stop, query.timeoutSeconds * 1000)
    return stop
  }

  /** For the garbage collector: changes an object's metadata, bypassing validation, without bumping generation. */
  updateMetadata(type: ResourceType, namespace: string | undefined, name: string, change: (meta: ObjectMeta) => void) {
    const old = this.store.get(this.#key(type, namespace, name))
    if (old === undefined) return undefined
    const next = structuredClone(old)
    change(next.metadata)
    const final = canonical(next)
    if (deepEqual(final, old)) return old
    const resource = storageResource(type)
    if (final.metadata.deletionTimestamp !== undefined && (final.metadata.finalizers ?? []).length === 0) {
      return this.store.remove(resource, final)
    }
    return this.store.update(resource, final)
  }

  /** Sets the author annotation to `author`, or removes it (a client's own value never stays); returns the object. */
  #recordAuthor(object: KubeObject, author: string | undefined): KubeObject {
    const key = this.#authorAnnotation
    if (key === undefined) return object
    const { [key]: _, ...others } = object.metadata.annotations ?? {}
    const annotations = author === undefined ? others : { ...others, [key]: author }
    if (Object.keys(annotations).length > 0) object.metadata.annotations = annotations
    else delete object.metadata.annotations
    return object
  }

  #bookmark(type: ResourceType, annotations?: Record<string, string>): KubeObject {
    const metadata: ObjectMeta = { resourceVersion: String(this.store.version) }
    if (annotations !== undefined) metadata.annotations = annotations
    return { kind: type.kind, apiVersion: type.apiVersion, metadata }
  }

  #key(type: ResourceType, namespace: string | undefined, name: string) {
    return { resource: storageResource(type), namespace: type.namespaced ? (namespace ?? "") : "", name }
  }

  #selectors(type: ResourceType, query: { labelSelector?: string; fieldSelector?: string }) {
    try {
      return {
        labels: parseLabelSelector(query.labelSelector),
        fields: parseFieldSelector(query.fieldSelector, selectableFields(type)),
      }
    } catch (error) {
      if (error instanceof SelectorError) throw badRequest(error.message)
      throw error
    }
  }

  /** The request body as an object of this type: a JSON object with matching apiVersion and kind and an object `metadata`. */
  /** `owned`: the body is this write's to change, so it is not copied first. */
  #decode(type: ResourceType, body: unknown, owned = false): KubeObject {
    if (!isObject(body)) throw badRequest(`the body of the request must be a ${type.kind} object`)
    const object = owned ? body : structuredClone(body)
    if (object.apiVersion !== undefined && object.apiVersion !== type.apiVersion) {
      throw badRequest(
        `the API version in the data (${String(object.apiVersion)}) does not match the expected API version (${type.apiVersion})`,
      )
    }
    if (object.kind !== undefined && object.kind !== type.kind) {
      throw badRequest(`the kind in the data (${String(object.kind)}) does not match the expected kind (${type.kind})`)
    }
    object.apiVersion = type.apiVersion
    object.kind = type.kind
    if (object.metadata === undefined || object.metadata === null) object.metadata = {}
    if (!isObject(object.metadata)) {
      throw badRequest(
        `${type.kind} in version "${type.version}" cannot be handled as a ${type.kind}: metadata must be an object`,
      )
    }
    const typeErrors = validateSchema(object.metadata, { type: "object", properties: metaTypes }, "metadata")
    if (typeErrors.length > 0) {
      throw badRequest(
        `${type.kind} in version "${type.version}" cannot be handled as a ${type.kind}: ${typeErrors.map((error) => `${error.field}: ${error.message}`).join(", ")}`,
      )
    }
    return object as KubeObject
  }

  #pruneUnknown(type: ResourceType, object: KubeObject, options: WriteOptions): string[] {
    const unknown = [...pruneMetadata(object.metadata), ...pruneUnknownFields(object, type.schema)]
    if (unknown.length === 0 || options.fieldValidation === "Ignore") return []
    const texts = unknown.map((path) => `unknown field "${path}"`)
    if (options.fieldValidation === "Strict") {
      throw badRequest(
        `${type.kind} in version "${type.version}" cannot be handled as a ${type.kind}: strict decoding error: ${texts.join(", ")}`,
      )
    }
    return texts
  }

  #generateName(type: ResourceType, namespace: string | undefined, prefix: string): string {
    const base = prefix.slice(0, 58)
    for (let attempt = 0; attempt < 8; attempt++) {
      let suffix = ""
      for (let index = 0; index < 5; index++) suffix += generatedNameAlphabet[randomInt(generatedNameAlphabet.length)]
      const name = base + suffix
      if (this.store.get(this.#key(type, namespace, name)) === undefined) return name
    }
    throw new KubeStatusError(409, "AlreadyExists", `could not generate a free name from the prefix "${prefix}"`)
  }

  #checkNamespaceOpen(type: ResourceType, name: string, namespace: string) {
    const holder = this.store.get({ resource: storageResource(namespaceType), namespace: "", name: namespace })
    if (holder === undefined) throw notFound({ group: "", resource: "namespaces" }, namespace)
    if (holder.metadata.deletionTimestamp !== undefined) {
      throw forbidden(
        `${type.plural}${type.group === "" ? "" : `.${type.group}`} "${name}" is forbidden: unable to create new content in namespace ${namespace} because it is being terminated`,
      )
    }
  }

  #validate(type: ResourceType, object: KubeObject, old: KubeObject | undefined) {
    const errors: FieldError[] = metadataErrors(object.metadata, type === namespaceType ? "label" : "subdomain")
    const nameSchema = type.schema.properties?.metadata?.properties?.name
    if (nameSchema !== undefined && object.metadata.name !== undefined) {
      errors.push(...validateSchema(object.metadata.name, nameSchema, "metadata.name"))
    }
    if (old !== undefined) errors.push(...newFinalizerErrors(old.metadata, object.metadata))
    const { metadata: _, ...body } = object
    const { metadata: __, ...oldBody } = old ?? {}
    errors.push(...validateSchema(body, withoutMetadata(type.schema), "", old === undefined ? undefined : oldBody))
    if (type === secretType) errors.push(...secretErrors(object, old))
    if (type === podType) {
      const resources = podResourceErrors(object.spec)
      if (resources.undecodable !== undefined) {
        throw badRequest(`Pod in version "v1" cannot be handled as a Pod: ${resources.undecodable}`)
      }
      errors.push(...resources.errors)
    }
    if (errors.length > 0) throw invalid(groupKind(type), object.metadata.name ?? "", errors)
  }

  /** The write shared by update and patch: Kubernetes' update strategy, then validation, then the store. */
  #commit(
    type: ResourceType,
    old: KubeObject,
    incoming: KubeObject,
    options: WriteOptions & { subresource?: "status" },
  ): WriteResult {
    const name = old.metadata.name ?? ""
    const meta = incoming.metadata
    if (meta.name !== undefined && meta.name !== name) {
      throw badRequest(`the name of the object (${meta.name}) does not match the name on the URL (${name})`)
    }
    if (
      type.namespaced &&
      meta.namespace !== undefined &&
      meta.namespace !== "" &&
      meta.namespace !== old.metadata.namespace
    ) {
      throw badRequest("the namespace of the provided object does not match the namespace sent on the request")
    }
    if (meta.resourceVersion !== old.metadata.resourceVersion) {
      throw conflict(groupResource(type), name, staleResourceVersionMessage)
    }
    if (meta.uid !== undefined && meta.uid !== "" && meta.uid !== old.metadata.uid) {
      // Written for an earlier object of the same name.
      throw conflict(
        groupResource(type),
        name,
        `Precondition failed: UID in precondition: ${meta.uid}, UID in object meta: ${old.metadata.uid}`,
      )
    }
    const warnings = this.#pruneUnknown(type, incoming, options)
    let next: KubeObject
    if (options.subresource === "status") {
      // A status write changes the status and nothing else. `old` is this request's own copy (the store
      // parses each read), so the rest is shared, not cloned: canonical() below copies what is stored.
      next = { ...old }
      if (incoming.status === undefined) delete next.status
      else next.status = incoming.status
    } else {
      next = incoming
      const system = [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
      ] as const
      for (const field of system) {
        if (old.metadata[field] === undefined) delete next.metadata[field]
        else (next.metadata as Record<string, unknown>)[field] = old.metadata[field]
      }
      next.metadata.name = name
      this.#recordAuthor(next, options.author)
      delete next.metadata.managedFields
      delete next.metadata.selfLink
      if (type.statusSubresource) {
        // A write to the main resource leaves the status as it was.
        if (old.status === undefined) delete next.status
        else next.status = old.status
      }
      if (type === secretType) normaliseSecret(next)
    }
    applyDefaults(next, type.schema)
    this.#validate(type, next, old)
    if (type.custom && specChanged(type, old, next)) next.metadata.generation = (old.metadata.generation ?? 0) + 1
    // A status write copies only the status: the rest is the stored object's, in canonical order already.
    const final = options.subresource === "status" ? canonicalTop(next, "status") : canonical(next)
    if (deepEqual(final, old)) return { object: old, warnings }
    if (options.dryRun === true) return { object: final, warnings }
    const resource = storageResource(type)
    if (
      final.metadata.deletionTimestamp !== undefined &&
      (final.metadata.finalizers ?? []).length === 0 &&
      type !== namespaceType
    ) {
      return { object: this.store.remove(resource, final), warnings }
    }
    return { object: this.store.update(resource, final), warnings }
  }
}

const metaTypes: Record<string, JsonSchema> = {
  name: { type: "string" },
  generateName: { type: "string" },
  namespace: { type: "string" },
  resourceVersion: { type: "string" },
  labels: { type: "object", nullable: true, additionalProperties: { type: "string" } },
  annotations: { type: "object", nullable: true, additionalProperties: { type: "string" } },
  finalizers: { type: "array", nullable: true, items: { type: "string" } },
  ownerReferences: { type: "array", nullable: true, items: { type: "object" } },
}

function withoutMetadata(schema: JsonSchema): JsonSchema {
  if (schema.properties?.metadata === undefined) return schema
  const { metadata: _, ...properties } = schema.properties
  return { ...schema, properties }
}

/** Did anything but metadata (and status, when it is a subresource) change? Only then does `metadata.generation` move. */
function specChanged(type: ResourceType, old: KubeObject, next: KubeObject): boolean {
  const strip = (object: KubeObject) => {
    const { metadata: _, ...rest } = object
    if (type.statusSubresource) delete rest.status
    return rest
  }
  return !deepEqual(strip(old), strip(next))
}

/** `object` with its top-level keys sorted and only `field` copied canonically; the rest is shared. */
function canonicalTop(object: KubeObject, field: string): KubeObject {
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(object).sort()) {
    const value = (object as Record<string, unknown>)[key]
    if (value !== undefined) out[key] = key === field ? canonical(value) : value
  }
  return out as KubeObject
}

function withFinalizers(object: KubeObject, finalizers: string[]): KubeObject {
  const next = structuredClone(object)
  if (finalizers.length === 0) delete next.metadata.finalizers
  else next.metadata.finalizers = finalizers
  return next
}

function propagationPolicy(options: DeleteOptions): PropagationPolicy {
  const policy = options.propagationPolicy
  if (policy === undefined || policy === "") {
    if (options.orphanDependents === true) return "Orphan"
    return "Background"
  }
  if (policy === "Background" || policy === "Foreground" || policy === "Orphan") return policy
  throw invalid({ group: "meta.k8s.io", kind: "DeleteOptions" }, "", [
    {
      reason: "FieldValueNotSupported",
      field: "propagationPolicy",
      message: `Unsupported value: "${policy}": supported values: "Foreground", "Background", "Orphan"`,
    },
  ])
}

/** The fields a list or watch can select on. */
function selectableFields(type: ResourceType): string[] {
  const fields = ["metadata.name"]
  if (type.namespaced) fields.push("metadata.namespace")
  if (type === secretType) fields.push("type")
  if (type === namespaceType) fields.push("status.phase")
  if (type === podType) fields.push("spec.nodeName", "spec.restartPolicy", "status.phase")
  return fields
}

/**
 * The grace period a Pod's deletion gets: the one asked for, else the Pod's own. A Pod no node runs
 * (never scheduled, or finished) has no containers to stop, so it goes at once, as in Kubernetes.
 */
function podGracePeriod(pod: KubeObject, options: DeleteOptions): number {
  const spec = isObject(pod.spec) ? pod.spec : {}
  const phase = isObject(pod.status) ? pod.status.phase : undefined
  if (typeof spec.nodeName !== "string" || spec.nodeName === "") return 0
  if (phase === "Succeeded" || phase === "Failed") return 0
  const asked = options.gracePeriodSeconds
  if (typeof asked === "number" && Number.isFinite(asked)) return Math.max(0, Math.floor(asked))
  const own = spec.terminationGracePeriodSeconds
  return typeof own === "number" ? own : 30
}

function matches(type: ResourceType, object: KubeObject, labels: LabelSelector, fields: FieldSelector): boolean {
  if (!labelsMatch(labels, object.metadata.labels)) return false
  if (fields.length === 0) return true
  const values: Record<string, string> = { "metadata.name": object.metadata.name ?? "" }
  if (type.namespaced) values["metadata.namespace"] = object.metadata.namespace ?? ""
  if (type === secretType) values.type = String(object.type ?? "")
  if (type === namespaceType && isObject(object.status)) values["status.phase"] = String(object.status.phase ?? "")
  if (type === podType) {
    const spec = isObject(object.spec) ? object.spec : {}
    values["spec.nodeName"] = String(spec.nodeName ?? "")
    values["spec.restartPolicy"] = String(spec.restartPolicy ?? "")
    values["status.phase"] = String((isObject(object.status) ? object.status.phase : undefined) ?? "")
  }
  return fieldsMatch(fields, values)
}

function parseVersion(text: string | undefined): number {
  const version = Number(text)
  if (text === undefined || !/^\d+$/.test(text) || !Number.isSafeInteger(version)) {
    throw badRequest(`invalid resource version: ${JSON.stringify(text ?? "")}`)
  }
  return version
}

type ContinueToken = { version: number; namespace: string; name: string }

function encodeContinue(token: ContinueToken): string {
  return Buffer.from(
    JSON.stringify({ v: "runnel.dev/continue/v1", rv: token.version, ns: token.namespace, start: token.name }),
  ).toString("base64url")
}

function decodeContinue(text: string): ContinueToken {
  try {
    const token = JSON.parse(Buffer.from(text, "base64url").toString("utf8"))
    if (
      token.v === "runnel.dev/continue/v1" &&
      Number.isSafeInteger(token.rv) &&
      typeof token.ns === "string" &&
      typeof token.start === "string"
    ) {
      return { version: token.rv, namespace: token.ns, name: token.start }
    }
  } catch {
    // answered below
  }
  throw badRequest("continue key is not valid: the token was not issued by this server")
}

const secretKey = /^[-._a-zA-Z0-9]+$/

/** Secret's `stringData` is write-only: it is merged into `data` (base64) on every write, and `type` defaults to Opaque. */
function normaliseSecret(object: KubeObject) {
  const data = isObject(object.data) ? { ...object.data } : {}
  if (isObject(object.stringData)) {
    for (const [key, value] of Object.entries(object.stringData)) {
      if (typeof value === "string") data[key] = Buffer.from(value, "utf8").toString("base64")
    }
  }
  delete object.stringData
  if (Object.keys(data).length > 0) object.data = data
  else delete object.data
  if (object.type === undefined || object.type === "") object.type = "Opaque"
}

function secretErrors(object: KubeObject, old: KubeObject | undefined): FieldError[] {
  const errors: FieldError[] = []
  const data = (isObject(object.data) ? object.data : {}) as JsonObject
  let size = 0
  for (const [key, value] of Object.entries(data)) {
    if (!secretKey.test(key)) {
      errors.push(
        fieldInvalid(
          `data[${key}]`,
          key,
          "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        ),
      )
    }
    size += typeof value === "string" ? Buffer.from(value, "base64").length : 0
  }
  if (size > 1024 * 1024)
    errors.push({ reason: "FieldValueTooLong", field: "data", message: "Too long: may not be more than 1048576 bytes" })
  if (old !== undefined) {
    if (old.type !== object.type) errors.push(fieldInvalid("type", object.type, "field is immutable"))
    if (old.immutable === true) {
      if (!deepEqual(old.data, object.data))
        errors.push(fieldForbidden("data", "field is immutable when `immutable` is set"))
      if (object.immutable !== true)
        errors.push(fieldForbidden("immutable", "field is immutable when `immutable` is set"))
    }
  }
  return errors
}
