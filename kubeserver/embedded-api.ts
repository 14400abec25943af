import { hostname } from "node:os"
import type { DatabaseSync } from "node:sqlite"
import { parse as parseYaml } from "yaml"
import { DockerHost, defaultDockerSocket } from "../lib/containers/docker-host.ts"
import {
  apiGroup,
  apiGroupList,
  apiVersions,
  openApiDocument,
  openApiRoot,
  resourceList,
  versionInfo,
} from "./discovery.ts"
import { GarbageCollector } from "./garbage-collector.ts"
import type { ApiRequest, ApiResponse } from "./http-exchange.ts"
import type { KubeStatus } from "./kube-status.ts"
import {
  badRequest,
  internalError,
  KubeStatusError,
  methodNotAllowed,
  pathNotFound,
  successStatus,
  tooLarge,
  unauthorized,
  unsupportedMediaType,
} from "./kube-status.ts"
import { Kubelet } from "./kubelet.ts"
import { SqliteObjectStore } from "./object-store.ts"
import { decodeProtobuf, ProtobufError, protobufMediaType } from "./protobuf.ts"
import type { DeleteOptions, FieldValidation, KubeList, WatchEvent, WriteOptions } from "./resource-api.ts"
import { patchContentTypes, ResourceApi } from "./resource-api.ts"
import type { CustomResourceDefinition, ResourceType } from "./resource-types.ts"
import {
  cronJobType,
  namespaceType,
  persistentVolumeClaimType,
  podType,
  ResourceTypes,
  resourceTypesFromCrds,
  secretType,
} from "./resource-types.ts"
import { isObject } from "./schema.ts"
import type { IncludeObject } from "./table.ts"
import { toTable } from "./table.ts"

/** What authenticate() says of a request: refused (false), allowed (true), or allowed as the named user. */
export type Authenticated = boolean | string

export type EmbeddedApiOptions = {
  /** The SQLite database: a file path, ":memory:", or an open database (which close() leaves open). */
  readonly db: string | DatabaseSync
  /** The CustomResourceDefinitions to serve (see loadCrds()); core Secrets and Namespaces are always served. */
  readonly crds: readonly CustomResourceDefinition[]
  /** The path the API is served under, "/k8s" by default. */
  readonly prefix?: string
  /** How many writes watches can resume across before they get 410 Expired. */
  readonly historyLimit?: number
  /**
   * How often watches that allow bookmarks get one; 10 s by default. Kubernetes sends one about every minute,
   * but client-node's Watch gives up on a connection silent for 30 s, so a shorter interval keeps idle watches open.
   */
  readonly bookmarkIntervalMs?: number
  /**
   * Decides whether a request may use the API (for example by its `Authorization: Bearer` token, which
   * `kubectl --token` and client-node send): false is 401 Unauthorized; a KubeStatusError it throws is the
   * answer (a 403 Forbidden, a 401 with its own message); true, or the name of the user, lets the request
   * through. Every request is allowed when absent: the server that mounts the handler owns authentication.
   */
  readonly authenticate?: (req: ApiRequest) => Authenticated | Promise<Authenticated>
  /**
   * The annotation in which the API records who made each write of an object (create, replace, patch and
   * delete; not status writes): the name authenticate() gave, or nothing when it gave none. The server
   * sets it, replacing whatever the client sent, so a client cannot name someone else.
   */
  readonly authorAnnotation?: string
  /** Request bodies larger than this are refused with 413; 3 MiB by default, like Kubernetes. */
  readonly maxBodyBytes?: number
  /**
   * The AES-256 key (32 bytes, e.g. a Buffer) core Secrets are encrypted with at rest. By default the key file
   * `<db>.key` beside the database (created, random, mode 0600, when missing); a random key for ":memory:".
   */
  readonly secretKey?: Uint8Array
  /** The Docker daemon Pods run on (a socket path, unix://, tcp:// or http://); the default socket when absent. */
  readonly dockerHost?: string
}

/**
 * The embedded Kubernetes-compatible API: an HTTP handler for `node:http`
 * (mount it on any server; it answers only under its prefix), and the same
 * verbs in process through `resources`.
 * - handle() returns false, and does nothing, for a path outside the prefix.
 * - close() ends open watches, stops the garbage collector and closes the store;
 *   it is idempotent. Requests after close() are answered 503.
 */
export type EmbeddedApi = {
  handle(req: ApiRequest, res: ApiResponse): boolean
  readonly prefix: string
  readonly resources: ResourceApi
  /** Resolves when the garbage collector has nothing left to do (cascading deletions done) and deleted Pods' containers are gone. */
  settled(): Promise<void>
  close(): void
}

export function createEmbeddedApi(options: EmbeddedApiOptions): EmbeddedApi {
  const prefix = (options.prefix ?? "/k8s").replace(/\/+$/, "")
  const types = new ResourceTypes([
    namespaceType,
    secretType,
    podType,
    persistentVolumeClaimType,
    cronJobType,
    ...resourceTypesFromCrds(options.crds),
  ])
  const store = new SqliteObjectStore({
    db: options.db,
    historyLimit: options.historyLimit,
    secretKey: options.secretKey,
  })
  const resources = new ResourceApi({
    store,
    types,
    bookmarkIntervalMs: options.bookmarkIntervalMs ?? 10_000,
    authorAnnotation: options.authorAnnotation,
  })
  const collector = new GarbageCollector(resources)
  const docker = new DockerHost(options.dockerHost ?? defaultDockerSocket, "start Docker to run Pods")
  const kubelet = new Kubelet(resources, docker, hostname().toLowerCase())
  const maxBodyBytes = options.maxBodyBytes ?? 3 * 1024 * 1024
  const watches = new Set<() => void>()
  let closed = false

  const context: Context = { prefix, types, resources, maxBodyBytes, watches, kubelet }
  return {
    prefix,
    resources,
    settled: async () => {
      await collector.idle()
      await kubelet.idle()
    },
    handle(req, res) {
      const path = (req.url ?? "/").split("?")[0] ?? "/"
      if (path !== prefix && !path.startsWith(`${prefix}/`)) return false
      if (closed) {
        send(
          res,
          503,
          new KubeStatusError(503, "InternalError", "the embedded Kubernetes API is shutting down").toStatus(),
        )
        return true
      }
      const authenticate = options.authenticate
      const served = (async () => {
        const user = authenticate === undefined ? true : await authenticate(req)
        if (user === false) throw unauthorized()
        await serve(context, req, res, user === true ? undefined : user)
      })()
      served.catch((error: unknown) => {
        const status =
          error instanceof KubeStatusError
            ? error
            : internalError(error instanceof Error ? error.message : String(error))
        if (!res.headersSent) send(res, status.code, status.toStatus())
        else res.destroy()
      })
      return true
    },
    close() {
      if (closed) return
      closed = true
      for (const stop of [...watches]) stop()
      kubelet.close()
      collector.close()
      store.close()
    },
  }
}

type Context = {
  prefix: string
  types: ResourceTypes
  resources: ResourceApi
  maxBodyBytes: number
  watches: Set<() => void>
  kubelet: Kubelet
}

function send(res: ApiResponse, code: number, body: unknown, headers: Record<string, string | string[]> = {}) {
  const text = `${JSON.stringify(body)}\n`
  res.writeHead(code, { "Content-Type": "application/json", "Cache-Control": "no-cache, private", ...headers })
  res.end(text)
}

/** One request; `author` is the user authenticate() named, recorded on the objects the request writes. */
async function serve(context: Context, req: ApiRequest, res: ApiResponse, author: string | undefined) {
  const url = new URL(req.url ?? "/", "http://embedded")
  const path = url.pathname.slice(context.prefix.length) || "/"
  const segments = path
    .split("/")
    .filter((segment) => segment !== "")
    .map(decodeURIComponent)
  const method = req.method ?? "GET"
  const { types } = context

  const [root, ...rest] = segments
  if (root === "version" && rest.length === 0) return send(res, 200, versionInfo)
  if ((root === "healthz" || root === "livez" || root === "readyz") && rest.length === 0) {
    res.writeHead(200, { "Content-Type": "text/plain; charset=utf-8" })
    res.end("ok")
    return
  }
  if (root === "openapi") return serveOpenApi(context, rest, res)
  if (root === "api") {
    if (rest.length === 0) return send(res, 200, apiVersions())
    if (rest[0] !== "v1") throw pathNotFound()
    if (rest.length === 1)
      return send(
        res,
        200,
        resourceList(
          "v1",
          types.all.filter((type) => type.group === ""),
        ),
      )
    return serveResource(context, "v1", rest.slice(1), method, url, req, res, author)
  }
  if (root === "apis") {
    if (rest.length === 0) return send(res, 200, apiGroupList(types))
    const group = apiGroup(types, rest[0] ?? "")
    if (group === undefined) throw pathNotFound()
    if (rest.length === 1) return send(res, 200, group)
    const apiVersion = `${rest[0]}/${rest[1]}`
    const served = types.all.filter((type) => type.apiVersion === apiVersion)
    if (served.length === 0) throw pathNotFound()
    if (rest.length === 2) return send(res, 200, resourceList(apiVersion, served))
    return serveResource(context, apiVersion, rest.slice(2), method, url, req, res, author)
  }
  throw pathNotFound()
}

function serveOpenApi(context: Context, rest: string[], res: ApiResponse) {
  if (rest[0] !== "v3") throw pathNotFound()
  if (rest.length === 1) return send(res, 200, openApiRoot(context.types, context.prefix))
  const document =
    rest[1] === "api" && rest.length === 3
      ? openApiDocument(context.types, "", rest[2] ?? "")
      : rest[1] === "apis" && rest.length === 4
        ? openApiDocument(context.types, rest[2] ?? "", rest[3] ?? "")
        : undefined
  if (document === undefined) throw pathNotFound()
  return send(res, 200, document)
}

type Target = {
  type: ResourceType
  namespace: string | undefined
  name: string | undefined
  subresource: string | undefined
}

function target(types: ResourceTypes, apiVersion: string, segments: string[]): Target {
  let namespace: string | undefined
  let rest = segments
  if (segments[0] === "namespaces" && segments.length >= 3) {
    const candidate = types.byPath(apiVersion, segments[2] ?? "")
    if (candidate?.namespaced === true) {
      namespace = segments[1]
      rest = segments.slice(2)
    }
  }
  const [plural, name, subresource, ...extra] = rest
  const type = types.byPath(apiVersion, plural ?? "")
  if (type === undefined || extra.length > 0) throw pathNotFound()
  if (namespace !== undefined && !type.namespaced) throw pathNotFound()
  const served =
    subresource === undefined ||
    (subresource === "status" && type.statusSubresource) ||
    (subresource === "log" && type === podType)
  if (!served) throw pathNotFound()
  if (type.namespaced && name !== undefined && namespace === undefined) throw pathNotFound()
  return { type, namespace, name, subresource }
}

async function serveResource(
  context: Context,
  apiVersion: string,
  segments: string[],
  method: string,
  url: URL,
  req: ApiRequest,
  res: ApiResponse,
  author: string | undefined,
) {
  const { resources } = context
  const { type, namespace, name, subresource } = target(context.types, apiVersion, segments)
  const query = url.searchParams
  const table = tableRequested(req.headers.accept)
  const include = (query.get("includeObject") ?? "Metadata") as IncludeObject
  const answer = (code: number, body: unknown, warnings: readonly string[] = []) =>
    send(
      res,
      code,
      body,
      warnings.length > 0 ? { Warning: warnings.map((text) => `299 - ${JSON.stringify(text)}`) } : {},
    )
  const listQuery = {
    labelSelector: query.get("labelSelector") ?? undefined,
    fieldSelector: query.get("fieldSelector") ?? undefined,
    resourceVersion: query.get("resourceVersion") ?? undefined,
    resourceVersionMatch: query.get("resourceVersionMatch") ?? undefined,
  }

  if (name === undefined) {
    if (type.namespaced && namespace === undefined && method !== "GET") throw methodNotAllowed()
    if (method === "GET") {
      if (query.get("watch") === "true" || query.get("watch") === "1") {
        return streamWatch(context, type, namespace, query, table ? include : undefined, res)
      }
      const limit = query.get("limit")
      const list = resources.list(type, namespace, {
        ...listQuery,
        limit: limit === null ? undefined : Number.parseInt(limit, 10),
        continue: query.get("continue") ?? undefined,
      })
      return answer(200, table ? toTable(type, list, include) : presentList(type, list))
    }
    if (method === "POST") {
      const { object, warnings } = resources.create(
        type,
        namespace,
        await readBody(context, req, type.custom ? "write" : "write-core"),
        writeOptions(query, author),
      )
      return answer(201, object, warnings)
    }
    if (method === "DELETE" && type !== namespaceType) {
      const options = await deleteOptions(context, req, query)
      return answer(200, presentList(type, resources.deleteCollection(type, namespace, listQuery, options, author)))
    }
    throw methodNotAllowed()
  }

  if (subresource === "log") {
    if (method !== "GET") throw methodNotAllowed()
    return context.kubelet.serveLogs(namespace ?? "", name, query, res)
  }
  const status = subresource === "status" ? "status" : undefined
  if (method === "GET") {
    const object = resources.get(type, namespace, name)
    return answer(
      200,
      table
        ? toTable(
            type,
            { ...listOf(type, [object]), metadata: { resourceVersion: object.metadata.resourceVersion ?? "" } },
            include,
          )
        : object,
    )
  }
  if (method === "PUT") {
    const { object, warnings } = resources.update(
      type,
      namespace,
      name,
      await readBody(context, req, type.custom ? "write" : "write-core"),
      {
        ...writeOptions(query, author),
        subresource: status,
      },
    )
    return answer(200, object, warnings)
  }
  if (method === "PATCH") {
    const contentType = mediaType(req.headers["content-type"])
    const patchType = patchContentTypes[contentType]
    if (patchType === undefined || patchType === "apply" || (patchType === "strategic" && type.custom)) {
      // Refuse before reading: the answer does not depend on the body.
      resources.patch(type, namespace, name, contentType, undefined)
    }
    const body = await readBody(context, req, "patch")
    const { object, warnings } = resources.patch(type, namespace, name, contentType, body, {
      ...writeOptions(query, author),
      subresource: status,
    })
    return answer(200, object, warnings)
  }
  if (method === "DELETE" && status === undefined) {
    const { object, deleted } = resources.delete(
      type,
      namespace,
      name,
      await deleteOptions(context, req, query),
      author,
    )
    // Custom resources answer with the object; core kinds with a Status once the object is gone.
    if (deleted && !type.custom) {
      return answer(200, successStatus({ name, group: type.group, kind: type.plural, uid: object.metadata.uid }))
    }
    return answer(200, object)
  }
  throw methodNotAllowed()
}

/** Items of core kinds are listed without apiVersion and kind, as Kubernetes encodes typed lists. */
function presentList(type: ResourceType, list: KubeList) {
  if (type.custom) return list
  return { ...list, items: list.items.map(({ apiVersion: _, kind: __, ...rest }) => rest) }
}

function listOf(type: ResourceType, items: KubeList["items"]): KubeList {
  return { apiVersion: type.apiVersion, kind: type.listKind, metadata: { resourceVersion: "" }, items }
}

/** True when the client asks for server-side printing (`as=Table`), as `kubectl get` does. */
function tableRequested(accept: string | undefined): boolean {
  if (accept === undefined) return false
  return accept.split(",").some((part) => {
    const parameters = part.split(";").map((parameter) => parameter.trim())
    return parameters.includes("as=Table") && parameters.includes("g=meta.k8s.io")
  })
}

const mediaType = (header: string | undefined) =>
  (header ?? "application/json").split(";")[0]?.trim().toLowerCase() ?? ""

function writeOptions(query: URLSearchParams, author: string | undefined): WriteOptions {
  const fieldValidation = query.get("fieldValidation") ?? undefined
  if (fieldValidation !== undefined && !["Strict", "Warn", "Ignore"].includes(fieldValidation)) {
    throw badRequest(`fieldValidation parameter unsupported: ${fieldValidation}; use Ignore, Warn or Strict`)
  }
  const dryRun = query.getAll("dryRun")
  if (dryRun.some((value) => value !== "All"))
    throw badRequest(`invalid dry run option: ${dryRun.join(", ")}; the only supported value is All`)
  return { fieldValidation: fieldValidation as FieldValidation | undefined, dryRun: dryRun.length > 0, author }
}

async function deleteOptions(context: Context, req: ApiRequest, query: URLSearchParams): Promise<DeleteOptions> {
  const body = await readBody(context, req, "optional")
  const given = isObject(body) ? (body as DeleteOptions) : {}
  const orphan = query.get("orphanDependents")
  const grace = query.get("gracePeriodSeconds")
  return {
    ...given,
    gracePeriodSeconds: grace === null ? given.gracePeriodSeconds : Number(grace),
    propagationPolicy: query.get("propagationPolicy") ?? given.propagationPolicy,
    orphanDependents: orphan === null ? given.orphanDependents : orphan === "true",
    dryRun: query.getAll("dryRun").includes("All") || (Array.isArray(given.dryRun) && given.dryRun.includes("All")),
  }
}

/** The decoded request body: JSON, or YAML for writes sent as `application/yaml`. */
async function readBody(
  context: Context,
  req: ApiRequest,
  use: "write" | "write-core" | "patch" | "optional",
): Promise<unknown> {
  const chunks: Uint8Array[] = []
  let size = 0
  for await (const chunk of req) {
    size += chunk.length
    if (size > context.maxBodyBytes) throw tooLarge(context.maxBodyBytes)
    chunks.push(chunk)
  }
  const body = Buffer.concat(chunks)
  const type = mediaType(req.headers["content-type"])
  if (type === protobufMediaType && use === "write-core") {
    try {
      return decodeProtobuf(body)
    } catch (error) {
      if (error instanceof ProtobufError)
        throw badRequest(`the protobuf request body could not be decoded: ${error.message}`)
      throw error
    }
  }
  const text = body.toString("utf8")
  if (text.trim() === "") {
    if (use === "optional") return undefined
    throw badRequest("the request has no body; send the object as JSON")
  }
  if (use !== "patch" && (type === "application/yaml" || type === "application/x-yaml")) {
    try {
      return parseYaml(text)
    } catch (error) {
      throw badRequest(`the request body is not valid YAML: ${(error as Error).message}`)
    }
  }
  if (use !== "patch" && type !== "application/json" && type !== "" && type !== "*/*") {
    const accepted = ["application/json", "application/yaml"]
    throw unsupportedMediaType(type, use === "write-core" ? [...accepted, protobufMediaType] : accepted)
  }
  try {
    return JSON.parse(text)
  } catch (error) {
    throw badRequest(`couldn't get version/kind; json parse error: ${(error as Error).message}`)
  }
}

function streamWatch(
  context: Context,
  type: ResourceType,
  namespace: string | undefined,
  query: URLSearchParams,
  table: IncludeObject | undefined,
  res: ApiResponse,
) {
  // Gone while the request was authenticated, before anything listened for its close: nobody to watch for.
  if (res.closed) return
  const timeout = query.get("timeoutSeconds")
  const present = (event: WatchEvent): WatchEvent | { type: string; object: unknown } => {
    if (table === undefined || event.type === "ERROR" || event.type === "BOOKMARK") return event
    return {
      type: event.type,
      object: toTable(
        type,
        { ...listOf(type, [event.object]), metadata: { resourceVersion: event.object.metadata.resourceVersion ?? "" } },
        table,
      ),
    }
  }
  let open = true
  let stop = () => {}
  const end = () => {
    if (!open) return
    open = false
    context.watches.delete(stop)
    res.end()
  }
  stop = context.resources.watch(
    type,
    namespace,
    {
      resourceVersion: query.get("resourceVersion") ?? undefined,
      resourceVersionMatch: query.get("resourceVersionMatch") ?? undefined,
      labelSelector: query.get("labelSelector") ?? undefined,
      fieldSelector: query.get("fieldSelector") ?? undefined,
      allowWatchBookmarks: query.get("allowWatchBookmarks") === "true",
      sendInitialEvents: query.get("sendInitialEvents") === "true",
      timeoutSeconds: timeout === null ? undefined : Number(timeout),
    },
    {
      event(event) {
        if (!open) return
        if (!res.headersSent) startStream(res)
        res.write(table === undefined ? watchLine(event) : `${JSON.stringify(present(event))}\n`)
      },
      end() {
        if (!res.headersSent) startStream(res)
        end()
      },
    },
  )
  if (!open) return
  if (!res.headersSent) startStream(res)
  context.watches.add(stop)
  // The response's close (not the request's, which fires once its body is read) means the client left.
  res.on("close", stop)
}

/** Each stored object as JSON, once: every watcher of its kind (the API server's index, the operator) gets the same text. */
const objectJson = new WeakMap<object, string>()

/** A watch event's line, as `JSON.stringify(event)` writes it. */
function watchLine(event: WatchEvent): string {
  if (event.type === "ERROR" || event.type === "BOOKMARK") return `${JSON.stringify(event)}\n`
  let json = objectJson.get(event.object)
  if (json === undefined) {
    json = JSON.stringify(event.object)
    objectJson.set(event.object, json)
  }
  return `{"type":${JSON.stringify(event.type)},"object":${json}}\n`
}

function startStream(res: ApiResponse) {
  res.writeHead(200, {
    "Content-Type": "application/json",
    "Cache-Control": "no-cache, private",
    "Transfer-Encoding": "chunked",
  })
  res.flushHeaders()
}

export type { KubeStatus }
