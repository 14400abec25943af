import type { FieldError } from "./kube-status.ts"
import { fieldForbidden, fieldInvalid, fieldRequired } from "./kube-status.ts"
import type { JsonSchema } from "./schema.ts"
import { isObject, pruneUnknownFields } from "./schema.ts"

/** `metadata` as Kubernetes' ObjectMeta; the store treats the rest of an object as opaque JSON. */
export type ObjectMeta = {
  name?: string
  generateName?: string
  namespace?: string
  uid?: string
  resourceVersion?: string
  generation?: number
  creationTimestamp?: string
  deletionTimestamp?: string
  deletionGracePeriodSeconds?: number
  labels?: Record<string, string>
  annotations?: Record<string, string>
  ownerReferences?: OwnerReference[]
  finalizers?: string[]
  managedFields?: unknown[]
  selfLink?: string
}

export type OwnerReference = {
  apiVersion: string
  kind: string
  name: string
  uid: string
  controller?: boolean
  blockOwnerDeletion?: boolean
}

/** Any object of a kind this server serves. */
export type KubeObject = { apiVersion: string; kind: string; metadata: ObjectMeta; [field: string]: unknown }

const stringMap: JsonSchema = { type: "object", additionalProperties: { type: "string" } }

/** ObjectMeta's fields, for pruning and type checks of `metadata`. */
export const objectMetaSchema: JsonSchema = {
  type: "object",
  properties: {
    name: { type: "string" },
    generateName: { type: "string" },
    namespace: { type: "string" },
    selfLink: { type: "string" },
    uid: { type: "string" },
    resourceVersion: { type: "string" },
    generation: { type: "integer" },
    creationTimestamp: { type: "string", nullable: true },
    deletionTimestamp: { type: "string", nullable: true },
    deletionGracePeriodSeconds: { type: "integer" },
    labels: stringMap,
    annotations: stringMap,
    ownerReferences: {
      type: "array",
      items: {
        type: "object",
        required: ["apiVersion", "kind", "name", "uid"],
        properties: {
          apiVersion: { type: "string" },
          kind: { type: "string" },
          name: { type: "string" },
          uid: { type: "string" },
          controller: { type: "boolean" },
          blockOwnerDeletion: { type: "boolean" },
        },
      },
    },
    finalizers: { type: "array", items: { type: "string" } },
    managedFields: { type: "array", items: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
  },
}

/** Prunes unknown `metadata` fields in place and returns their paths. */
export const pruneMetadata = (metadata: unknown) => pruneUnknownFields(metadata, objectMetaSchema, "metadata")

const subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
const label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
const qualifiedNamePart = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/
const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/

const subdomainMessage =
  "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
const labelMessage =
  "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
const qualifiedNameMessage =
  "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
const labelValueMessage =
  "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"

/** The errors of a name as an RFC 1123 subdomain (at most 253) or, for namespaces, label (at most 63). */
export function nameErrors(field: string, name: string, kind: "subdomain" | "label"): FieldError[] {
  const max = kind === "subdomain" ? 253 : 63
  const errors: FieldError[] = []
  if (name.length > max) errors.push(fieldInvalid(field, name, `must be no more than ${max} characters`))
  if (!(kind === "subdomain" ? subdomain : label).test(name)) {
    errors.push(fieldInvalid(field, name, kind === "subdomain" ? subdomainMessage : labelMessage))
  }
  return errors
}

function qualifiedNameErrors(field: string, key: string): FieldError[] {
  const slash = key.lastIndexOf("/")
  const prefix = slash === -1 ? undefined : key.slice(0, slash)
  const name = slash === -1 ? key : key.slice(slash + 1)
  const errors: FieldError[] = []
  if (prefix !== undefined && (prefix.length === 0 || prefix.length > 253 || !subdomain.test(prefix))) {
    errors.push(fieldInvalid(field, key, `prefix part ${subdomainMessage}`))
  }
  if (name.length === 0 || name.length > 63 || !qualifiedNamePart.test(name)) {
    errors.push(
      fieldInvalid(
        field,
        key,
        name.length > 63 ? "name part must be no more than 63 characters" : qualifiedNameMessage,
      ),
    )
  }
  return errors
}

/** What Kubernetes' ValidateObjectMeta refuses: names, label keys and values, annotation keys, owner references. */
export function metadataErrors(metadata: ObjectMeta, nameKind: "subdomain" | "label"): FieldError[] {
  const errors: FieldError[] = []
  if (metadata.name === undefined || metadata.name === "") {
    errors.push(fieldRequired("metadata.name"))
  } else {
    errors.push(...nameErrors("metadata.name", metadata.name, nameKind))
  }
  for (const [key, value] of Object.entries(metadata.labels ?? {})) {
    errors.push(...qualifiedNameErrors("metadata.labels", key))
    if (value.length > 63) errors.push(fieldInvalid(`metadata.labels`, value, "must be no more than 63 characters"))
    else if (!labelValue.test(value)) errors.push(fieldInvalid("metadata.labels", value, labelValueMessage))
  }
  for (const key of Object.keys(metadata.annotations ?? {})) {
    errors.push(...qualifiedNameErrors("metadata.annotations", key.toLowerCase()))
  }
  const annotationBytes = Object.entries(metadata.annotations ?? {}).reduce(
    (sum, [key, value]) => sum + Buffer.byteLength(key) + Buffer.byteLength(value),
    0,
  )
  if (annotationBytes > 256 * 1024) {
    errors.push({
      reason: "FieldValueTooLong",
      field: "metadata.annotations",
      message: "Too long: must have at most 262144 bytes",
    })
  }
  const controllers = (metadata.ownerReferences ?? []).filter((reference) => reference.controller === true)
  if (controllers.length > 1) {
    errors.push(fieldInvalid("metadata.ownerReferences", "", "Only one reference can have Controller set to true"))
  }
  ;(metadata.ownerReferences ?? []).forEach((reference, index) => {
    const field = `metadata.ownerReferences[${index}]`
    if (!reference.apiVersion) errors.push(fieldInvalid(`${field}.apiVersion`, "", "version must not be empty"))
    if (!reference.kind) errors.push(fieldInvalid(`${field}.kind`, "", "kind must not be empty"))
    if (!reference.name) errors.push(fieldInvalid(`${field}.name`, "", "name must not be empty"))
    if (!reference.uid) errors.push(fieldInvalid(`${field}.uid`, "", "uid must not be empty"))
  })
  ;(metadata.finalizers ?? []).forEach((finalizer, index) => {
    if (finalizer === "")
      errors.push(fieldInvalid(`metadata.finalizers[${index}]`, finalizer, "name part must be non-empty"))
  })
  return errors
}

/** The one rule Kubernetes keeps for finalizers of an object being deleted. */
export function newFinalizerErrors(oldMeta: ObjectMeta, newMeta: ObjectMeta): FieldError[] {
  if (oldMeta.deletionTimestamp === undefined) return []
  const added = (newMeta.finalizers ?? []).filter((finalizer) => !(oldMeta.finalizers ?? []).includes(finalizer))
  if (added.length === 0) return []
  return [
    fieldForbidden(
      "metadata.finalizers",
      `no new finalizers can be added if the object is being deleted, found new finalizers []string{${added.map((name) => JSON.stringify(name)).join(", ")}}`,
    ),
  ]
}

export const metadataOf = (object: unknown): ObjectMeta =>
  isObject(object) && isObject(object.metadata) ? (object.metadata as ObjectMeta) : {}
