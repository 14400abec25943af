import { createHash } from "node:crypto"
import type { ResourceType, ResourceTypes } from "./resource-types.ts"
import type { JsonSchema } from "./schema.ts"

/**
 * Discovery and OpenAPI documents, built from the served types. kubectl reads
 * the legacy discovery (`/api`, `/api/v1`, `/apis`, `/apis/GROUP/VERSION`) to map
 * kinds and short names to paths, and OpenAPI v3 (`/openapi/v3`, one document
 * per group version) to learn that PATCH takes `fieldValidation` (so `kubectl
 * apply` validates on the server) and which patch types each kind accepts.
 */

/** The Kubernetes version this API speaks the protocol of; only the protocol, not the rest of Kubernetes. */
export const versionInfo = {
  major: "1",
  minor: "32",
  gitVersion: "v1.32.0-runnel.embedded",
  gitCommit: "",
  gitTreeState: "clean",
  buildDate: "1970-01-01T00:00:00Z",
  goVersion: "",
  compiler: "runnel",
  platform: "linux/amd64",
}

const verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

function storageVersionHash(type: ResourceType) {
  return createHash("sha256").update(`${type.group}/${type.version}/${type.kind}`).digest("base64").slice(0, 11)
}

export function apiVersions() {
  return {
    kind: "APIVersions",
    versions: ["v1"],
    serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: "" }],
  }
}

export function resourceList(groupVersion: string, types: readonly ResourceType[]) {
  return {
    kind: "APIResourceList",
    apiVersion: "v1",
    groupVersion,
    resources: types.flatMap((type) => {
      const resource: Record<string, unknown> = {
        name: type.plural,
        singularName: type.singular,
        namespaced: type.namespaced,
        kind: type.kind,
        verbs: type.kind === "Namespace" ? verbs.filter((verb) => verb !== "deletecollection") : verbs,
        storageVersionHash: storageVersionHash(type),
      }
      if (type.shortNames.length > 0) resource.shortNames = type.shortNames
      if (type.categories.length > 0) resource.categories = type.categories
      const status = {
        name: `${type.plural}/status`,
        singularName: "",
        namespaced: type.namespaced,
        kind: type.kind,
        verbs: ["get", "patch", "update"],
      }
      return type.statusSubresource ? [resource, status] : [resource]
    }),
  }
}

function group(name: string, versions: string[]) {
  const list = versions.map((version) => ({ groupVersion: `${name}/${version}`, version }))
  return { name, versions: list, preferredVersion: list[0] }
}

/** The named groups (all but the core group), each with its versions. */
function namedGroups(types: ResourceTypes) {
  const groups = new Map<string, string[]>()
  for (const { group: name, version } of types.groupVersions()) {
    if (name === "") continue
    groups.set(name, [...(groups.get(name) ?? []), version])
  }
  return groups
}

export function apiGroupList(types: ResourceTypes) {
  return {
    kind: "APIGroupList",
    apiVersion: "v1",
    groups: [...namedGroups(types)].map(([name, versions]) => group(name, versions)),
  }
}

export function apiGroup(types: ResourceTypes, name: string) {
  const versions = namedGroups(types).get(name)
  return versions === undefined ? undefined : { kind: "APIGroup", apiVersion: "v1", ...group(name, versions) }
}

/** `/openapi/v3`: where each group version's document is; `prefix` is the path this API is served under. */
export function openApiRoot(types: ResourceTypes, prefix: string) {
  const paths: Record<string, { serverRelativeURL: string }> = {}
  for (const { group: name, version, types: members } of types.groupVersions()) {
    const path = name === "" ? `api/${version}` : `apis/${name}/${version}`
    const hash = createHash("sha512").update(JSON.stringify(members)).digest("hex").slice(0, 64).toUpperCase()
    paths[path] = { serverRelativeURL: `${prefix}/openapi/v3/${path}?hash=${hash}` }
  }
  return { paths }
}

const schemaName = (type: ResourceType) =>
  `${type.group === "" ? "io.k8s.api.core" : type.group.split(".").reverse().join(".")}.${type.version}.${type.kind}`

const queryParameter = (name: string, description: string) => ({
  name,
  in: "query",
  description,
  schema: { type: "string", uniqueItems: true },
})
const pathParameter = (name: string) => ({
  name,
  in: "path",
  required: true,
  schema: { type: "string", uniqueItems: true },
})

/** One group version's OpenAPI v3 document, or undefined when it is not served. */
export function openApiDocument(types: ResourceTypes, groupName: string, version: string) {
  const served = types.groupVersions().find((entry) => entry.group === groupName && entry.version === version)
  if (served === undefined) return undefined
  const paths: Record<string, unknown> = {}
  const schemas: Record<string, unknown> = {}
  for (const type of served.types) {
    const gvk = { group: type.group, version: type.version, kind: type.kind }
    const ref = { $ref: `#/components/schemas/${schemaName(type)}` }
    const body = (description: string) => ({ content: { "application/json": { schema: ref } }, description })
    const answer = { "200": { description: "OK", content: { "application/json": { schema: ref } } } }
    const patchTypes = ["application/json-patch+json", "application/merge-patch+json"]
    if (!type.custom) patchTypes.push("application/strategic-merge-patch+json")
    const write = [
      queryParameter("dryRun", "When present, modifications are not persisted."),
      queryParameter("fieldManager", "A name for the actor making the change."),
      queryParameter("fieldValidation", "Ignore, Warn (the default) or Strict: what to do with unknown fields."),
    ]
    const base = type.group === "" ? `/api/${type.version}` : `/apis/${type.group}/${type.version}`
    const collection = type.namespaced ? `${base}/namespaces/{namespace}/${type.plural}` : `${base}/${type.plural}`
    const scope = type.namespaced ? [pathParameter("namespace")] : []
    const operation = (action: string, extra: object) => ({
      "x-kubernetes-action": action,
      "x-kubernetes-group-version-kind": gvk,
      tags: [type.group === "" ? "core_v1" : `${type.group}_${type.version}`],
      ...extra,
    })
    paths[collection] = {
      parameters: scope,
      get: operation("list", { operationId: `list${type.kind}`, responses: answer }),
      post: operation("post", {
        operationId: `create${type.kind}`,
        parameters: write,
        requestBody: body("the object"),
        responses: answer,
      }),
    }
    const itemOperations = (suffix: string) => ({
      parameters: [pathParameter("name"), ...scope],
      get: operation("get", { operationId: `read${type.kind}${suffix}`, responses: answer }),
      put: operation("put", {
        operationId: `replace${type.kind}${suffix}`,
        parameters: write,
        requestBody: body("the object"),
        responses: answer,
      }),
      patch: operation("patch", {
        operationId: `patch${type.kind}${suffix}`,
        parameters: [...write, queryParameter("force", "Not supported: server-side apply is not served.")],
        requestBody: {
          content: Object.fromEntries(patchTypes.map((media) => [media, { schema: { type: "object" } }])),
          required: true,
        },
        responses: answer,
      }),
    })
    paths[`${collection}/{name}`] = {
      ...itemOperations(""),
      delete: operation("delete", { operationId: `delete${type.kind}`, responses: answer }),
    }
    if (type.statusSubresource) paths[`${collection}/{name}/status`] = itemOperations("Status")
    schemas[schemaName(type)] = { ...withObjectMeta(type.schema), "x-kubernetes-group-version-kind": [gvk] }
  }
  schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"] = objectMetaDocument
  return {
    openapi: "3.0.0",
    info: { title: "runnel embedded Kubernetes API", version: versionInfo.gitVersion },
    paths,
    components: { schemas },
  }
}

const objectMetaDocument = {
  type: "object",
  description: "Standard object metadata.",
  properties: {
    name: { type: "string" },
    generateName: { type: "string" },
    namespace: { type: "string" },
    uid: { type: "string" },
    resourceVersion: { type: "string" },
    generation: { type: "integer", format: "int64" },
    creationTimestamp: { type: "string", format: "date-time" },
    deletionTimestamp: { type: "string", format: "date-time" },
    labels: { type: "object", additionalProperties: { type: "string", default: "" } },
    annotations: { type: "object", additionalProperties: { type: "string", default: "" } },
    finalizers: { type: "array", items: { type: "string", default: "" }, "x-kubernetes-patch-strategy": "merge" },
    ownerReferences: {
      type: "array",
      items: { type: "object", "x-kubernetes-map-type": "atomic" },
      "x-kubernetes-patch-merge-key": "uid",
      "x-kubernetes-patch-strategy": "merge",
    },
  },
}

function withObjectMeta(schema: JsonSchema): object {
  const metadata = {
    allOf: [{ $ref: "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" }],
    default: {},
  }
  return { ...schema, properties: { ...schema.properties, metadata } }
}
