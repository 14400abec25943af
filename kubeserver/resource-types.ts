import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { parseAllDocuments } from "yaml"
import type { JsonSchema } from "./schema.ts"

/** A column of `kubectl get`, as a CRD's `additionalPrinterColumns` declares it. */
export type PrinterColumn = {
  readonly name: string
  readonly type: string
  readonly format?: string
  readonly description?: string
  readonly priority: number
  readonly jsonPath: string
}

/**
 * One kind this server serves, with what Kubernetes' discovery says of it and
 * what changes its behaviour: custom resources only take JSON and merge
 * patches, answer a deletion with the object and carry `metadata.generation`.
 */
export type ResourceType = {
  /** "" for the core group. */
  readonly group: string
  readonly version: string
  /** `runnel.dev/v1alpha1`, or `v1` for the core group. */
  readonly apiVersion: string
  readonly kind: string
  readonly listKind: string
  readonly plural: string
  readonly singular: string
  readonly shortNames: readonly string[]
  readonly categories: readonly string[]
  readonly namespaced: boolean
  readonly custom: boolean
  readonly statusSubresource: boolean
  readonly schema: JsonSchema
  readonly printerColumns: readonly PrinterColumn[]
}

/** A `CustomResourceDefinition` as read from YAML; only what this server uses is typed. */
export type CustomResourceDefinition = {
  apiVersion: string
  kind: string
  metadata?: { name?: string }
  spec: {
    group: string
    scope: "Namespaced" | "Cluster"
    names: {
      kind: string
      listKind?: string
      plural: string
      singular?: string
      shortNames?: string[]
      categories?: string[]
    }
    versions: {
      name: string
      served: boolean
      storage: boolean
      subresources?: { status?: object }
      additionalPrinterColumns?: {
        name: string
        type: string
        format?: string
        description?: string
        priority?: number
        jsonPath: string
      }[]
      schema?: { openAPIV3Schema?: JsonSchema }
    }[]
  }
}

/** Reads every `apiextensions.k8s.io/v1` CRD in the YAML files of `dir` (other documents are skipped). */
export function loadCrds(dir: string): CustomResourceDefinition[] {
  const files = readdirSync(dir)
    .filter((file) => file.endsWith(".yaml") || file.endsWith(".yml"))
    .sort()
  return files.flatMap((file) => parseCrds(readFileSync(join(dir, file), "utf8"), join(dir, file)))
}

/** The CRDs in one YAML text of one or more documents. */
export function parseCrds(text: string, source = "CRD text"): CustomResourceDefinition[] {
  const crds: CustomResourceDefinition[] = []
  for (const document of parseAllDocuments(text)) {
    if (document.errors.length > 0) throw new Error(`${source}: ${document.errors[0]?.message}`)
    const value: unknown = document.toJS()
    if (value === null || typeof value !== "object") continue
    const object = value as Partial<CustomResourceDefinition>
    if (object.apiVersion !== "apiextensions.k8s.io/v1" || object.kind !== "CustomResourceDefinition") continue
    if (object.spec?.group === undefined || object.spec.names?.plural === undefined) {
      throw new Error(
        `${source}: CustomResourceDefinition ${object.metadata?.name ?? "(unnamed)"} has no spec.group or spec.names`,
      )
    }
    crds.push(object as CustomResourceDefinition)
  }
  return crds
}

const ageColumn: PrinterColumn = { name: "Age", type: "date", priority: 0, jsonPath: ".metadata.creationTimestamp" }

/** The served versions of the CRDs as resource types; a CRD without a schema accepts any object, as with `x-kubernetes-preserve-unknown-fields`. */
export function resourceTypesFromCrds(crds: readonly CustomResourceDefinition[]): ResourceType[] {
  return crds.flatMap((crd) =>
    crd.spec.versions
      .filter((version) => version.served)
      .map((version): ResourceType => {
        const names = crd.spec.names
        const columns = version.additionalPrinterColumns
        return {
          group: crd.spec.group,
          version: version.name,
          apiVersion: `${crd.spec.group}/${version.name}`,
          kind: names.kind,
          listKind: names.listKind ?? `${names.kind}List`,
          plural: names.plural,
          singular: names.singular ?? names.kind.toLowerCase(),
          shortNames: names.shortNames ?? [],
          categories: names.categories ?? [],
          namespaced: crd.spec.scope === "Namespaced",
          custom: true,
          statusSubresource: version.subresources?.status !== undefined,
          schema: version.schema?.openAPIV3Schema ?? { type: "object", "x-kubernetes-preserve-unknown-fields": true },
          printerColumns:
            columns === undefined || columns.length === 0
              ? [ageColumn]
              : columns.map((column) => ({ ...column, priority: column.priority ?? 0 })),
        }
      }),
  )
}

const stringMap: JsonSchema = { type: "object", additionalProperties: { type: "string" } }

/** The fields every object of a built-in kind has besides its own. */
const typeMeta: Record<string, JsonSchema> = {
  apiVersion: { type: "string" },
  kind: { type: "string" },
  metadata: { type: "object" },
}

/** Core v1 Secret, as far as runnel uses it: data, stringData, type, immutable. */
export const secretType: ResourceType = {
  group: "",
  version: "v1",
  apiVersion: "v1",
  kind: "Secret",
  listKind: "SecretList",
  plural: "secrets",
  singular: "secret",
  shortNames: [],
  categories: [],
  namespaced: true,
  custom: false,
  statusSubresource: false,
  schema: {
    type: "object",
    properties: {
      ...typeMeta,
      data: { type: "object", additionalProperties: { type: "string", format: "byte" } },
      stringData: stringMap,
      type: { type: "string" },
      immutable: { type: "boolean" },
    },
  },
  printerColumns: [
    { name: "Type", type: "string", priority: 0, jsonPath: ".type" },
    { name: "Data", type: "integer", priority: 0, jsonPath: ".data" },
    ageColumn,
  ],
}

/** Core v1 Namespace, as far as kubectl needs it: a name, and a phase. */
export const namespaceType: ResourceType = {
  group: "",
  version: "v1",
  apiVersion: "v1",
  kind: "Namespace",
  listKind: "NamespaceList",
  plural: "namespaces",
  singular: "namespace",
  shortNames: ["ns"],
  categories: [],
  namespaced: false,
  custom: false,
  statusSubresource: true,
  schema: {
    type: "object",
    properties: {
      ...typeMeta,
      spec: { type: "object", properties: { finalizers: { type: "array", items: { type: "string" } } } },
      status: { type: "object", properties: { phase: { type: "string", enum: ["Active", "Terminating"] } } },
    },
  },
  printerColumns: [{ name: "Status", type: "string", priority: 0, jsonPath: ".status.phase" }, ageColumn],
}

/**
 * batch/v1 CronJob, as far as runnel's schedules use it: the spec Kubernetes
 * validates and defaults (concurrencyPolicy Allow, suspend false, history
 * limits 3 and 1) and its status. The embedded API stores CronJobs; it has no
 * CronJob controller (on one machine the operator's timer fires schedules).
 */
export const cronJobType: ResourceType = {
  group: "batch",
  version: "v1",
  apiVersion: "batch/v1",
  kind: "CronJob",
  listKind: "CronJobList",
  plural: "cronjobs",
  singular: "cronjob",
  shortNames: ["cj"],
  categories: ["all"],
  namespaced: true,
  custom: false,
  statusSubresource: true,
  schema: {
    type: "object",
    required: ["spec"],
    properties: {
      ...typeMeta,
      spec: {
        type: "object",
        required: ["schedule", "jobTemplate"],
        properties: {
          schedule: { type: "string", minLength: 1 },
          timeZone: { type: "string" },
          startingDeadlineSeconds: { type: "integer", minimum: 0 },
          concurrencyPolicy: { type: "string", enum: ["Allow", "Forbid", "Replace"], default: "Allow" },
          suspend: { type: "boolean", default: false },
          successfulJobsHistoryLimit: { type: "integer", minimum: 0, default: 3 },
          failedJobsHistoryLimit: { type: "integer", minimum: 0, default: 1 },
          jobTemplate: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
        },
      },
      status: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
    },
  },
  printerColumns: [
    { name: "Schedule", type: "string", priority: 0, jsonPath: ".spec.schedule" },
    { name: "Timezone", type: "string", priority: 0, jsonPath: ".spec.timeZone" },
    { name: "Suspend", type: "boolean", priority: 0, jsonPath: ".spec.suspend" },
    { name: "Last Schedule", type: "date", priority: 0, jsonPath: ".status.lastScheduleTime" },
    ageColumn,
  ],
}

/** Looks resource types up the ways the HTTP paths and the garbage collector need. */
export class ResourceTypes {
  readonly all: readonly ResourceType[]
  #byPath = new Map<string, ResourceType>()
  #byKind = new Map<string, ResourceType>()

  constructor(types: readonly ResourceType[]) {
    this.all = types
    for (const type of types) {
      const path = `${type.apiVersion}/${type.plural}`
      if (this.#byPath.has(path)) throw new Error(`the resource ${path} is defined twice`)
      this.#byPath.set(path, type)
      this.#byKind.set(`${type.apiVersion}/${type.kind}`, type)
    }
  }

  /** By `runnel.dev/v1alpha1` (or `v1`) and plural. */
  byPath(apiVersion: string, plural: string): ResourceType | undefined {
    return this.#byPath.get(`${apiVersion}/${plural}`)
  }

  byKind(apiVersion: string, kind: string): ResourceType | undefined {
    return this.#byKind.get(`${apiVersion}/${kind}`)
  }

  /** The API versions served, each with its types, in the order given. */
  groupVersions(): { group: string; version: string; types: ResourceType[] }[] {
    const out = new Map<string, { group: string; version: string; types: ResourceType[] }>()
    for (const type of this.all) {
      const entry = out.get(type.apiVersion) ?? { group: type.group, version: type.version, types: [] }
      entry.types.push(type)
      out.set(type.apiVersion, entry)
    }
    return [...out.values()]
  }
}

/** A key under which the store keeps every kind apart: `runnel.dev/pipelines`, `/secrets`. */
export const storageResource = (type: ResourceType) => `${type.group}/${type.plural}`

const container: JsonSchema = {
  type: "object",
  required: ["name", "image"],
  "x-kubernetes-preserve-unknown-fields": true,
  properties: {
    name: { type: "string", minLength: 1 },
    image: { type: "string", minLength: 1 },
    command: { type: "array", items: { type: "string" } },
    args: { type: "array", items: { type: "string" } },
    workingDir: { type: "string" },
  },
}

/**
 * core/v1 Pod: what the embedded kubelet (kubelet.ts) runs in Docker. The spec
 * keeps every field it is given (only what the kubelet reads is checked); the
 * status is the kubelet's, through the status subresource.
 */
export const podType: ResourceType = {
  group: "",
  version: "v1",
  apiVersion: "v1",
  kind: "Pod",
  listKind: "PodList",
  plural: "pods",
  singular: "pod",
  shortNames: ["po"],
  categories: ["all"],
  namespaced: true,
  custom: false,
  statusSubresource: true,
  schema: {
    type: "object",
    required: ["spec"],
    properties: {
      ...typeMeta,
      spec: {
        type: "object",
        required: ["containers"],
        "x-kubernetes-preserve-unknown-fields": true,
        properties: {
          containers: { type: "array", minItems: 1, items: container },
          restartPolicy: { type: "string", enum: ["Always", "OnFailure", "Never"], default: "Always" },
          terminationGracePeriodSeconds: { type: "integer", minimum: 0, default: 30 },
          nodeName: { type: "string" },
          schedulerName: { type: "string", default: "default-scheduler" },
        },
      },
      status: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
    },
  },
  // Computed as kubectl's own printer does (table.ts): READY, STATUS and RESTARTS are not plain paths.
  printerColumns: [
    { name: "Ready", type: "string", priority: 0, jsonPath: ".status.containerStatuses" },
    { name: "Status", type: "string", priority: 0, jsonPath: ".status.phase" },
    { name: "Restarts", type: "integer", priority: 0, jsonPath: ".status.containerStatuses" },
    ageColumn,
    { name: "IP", type: "string", priority: 1, jsonPath: ".status.podIP" },
    { name: "Node", type: "string", priority: 1, jsonPath: ".spec.nodeName" },
  ],
}

/** core/v1 PersistentVolumeClaim: a Docker volume on the embedded node, Bound once created. */
export const persistentVolumeClaimType: ResourceType = {
  group: "",
  version: "v1",
  apiVersion: "v1",
  kind: "PersistentVolumeClaim",
  listKind: "PersistentVolumeClaimList",
  plural: "persistentvolumeclaims",
  singular: "persistentvolumeclaim",
  shortNames: ["pvc"],
  categories: [],
  namespaced: true,
  custom: false,
  statusSubresource: true,
  schema: {
    type: "object",
    required: ["spec"],
    properties: {
      ...typeMeta,
      spec: {
        type: "object",
        required: ["accessModes", "resources"],
        "x-kubernetes-preserve-unknown-fields": true,
        properties: {
          accessModes: {
            type: "array",
            minItems: 1,
            items: { type: "string", enum: ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"] },
          },
          storageClassName: { type: "string" },
          volumeMode: { type: "string", enum: ["Filesystem", "Block"], default: "Filesystem" },
          resources: {
            type: "object",
            required: ["requests"],
            properties: {
              requests: {
                type: "object",
                required: ["storage"],
                properties: { storage: { "x-kubernetes-int-or-string": true } },
              },
            },
          },
        },
      },
      status: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
    },
  },
  printerColumns: [
    { name: "Status", type: "string", priority: 0, jsonPath: ".status.phase" },
    { name: "Capacity", type: "string", priority: 0, jsonPath: ".status.capacity.storage" },
    { name: "Access Modes", type: "string", priority: 0, jsonPath: ".status.accessModes" },
    { name: "StorageClass", type: "string", priority: 0, jsonPath: ".spec.storageClassName" },
    ageColumn,
  ],
}
