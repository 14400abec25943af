import type { FieldError } from "./kube-status.ts"
import { fieldInvalid, fieldRequired, shownValue } from "./kube-status.ts"

/**
 * The parts of a CRD's `openAPIV3Schema` (a structural schema) this server
 * acts on. Pruning, defaulting and validation follow Kubernetes'
 * apiextensions-apiserver: unknown fields are pruned (and reported, so that
 * `fieldValidation=Strict` can refuse them), nulls of non-nullable fields are
 * dropped before defaults apply, and every violation is one field error.
 */
export type JsonSchema = {
  type?: "object" | "array" | "string" | "integer" | "number" | "boolean"
  description?: string
  properties?: Record<string, JsonSchema>
  required?: string[]
  items?: JsonSchema
  additionalProperties?: JsonSchema | boolean
  enum?: unknown[]
  default?: unknown
  nullable?: boolean
  format?: string
  pattern?: string
  minLength?: number
  maxLength?: number
  minimum?: number
  maximum?: number
  exclusiveMinimum?: boolean
  exclusiveMaximum?: boolean
  multipleOf?: number
  minItems?: number
  maxItems?: number
  uniqueItems?: boolean
  minProperties?: number
  maxProperties?: number
  allOf?: JsonSchema[]
  anyOf?: JsonSchema[]
  oneOf?: JsonSchema[]
  not?: JsonSchema
  "x-kubernetes-preserve-unknown-fields"?: boolean
  "x-kubernetes-int-or-string"?: boolean
  "x-kubernetes-embedded-resource"?: boolean
  "x-kubernetes-list-type"?: "atomic" | "set" | "map"
  "x-kubernetes-list-map-keys"?: string[]
  "x-kubernetes-map-type"?: string
  "x-kubernetes-validations"?: { rule: string; message?: string; reason?: string; fieldPath?: string }[]
}

export type JsonObject = Record<string, unknown>

export const isObject = (value: unknown): value is JsonObject =>
  value !== null && typeof value === "object" && !Array.isArray(value)

const join = (path: string, key: string) => (path === "" ? key : `${path}.${key}`)

/**
 * Removes the fields `schema` does not declare, in place, and returns their
 * paths (`spec.foo`, `spec.items[0].bar`). At the root, `apiVersion`, `kind`
 * and `metadata` are left to the caller.
 */
export function pruneUnknownFields(value: unknown, schema: JsonSchema, path = ""): string[] {
  const unknown: string[] = []
  prune(value, schema, path, unknown, path === "")
  return unknown
}

function prune(value: unknown, schema: JsonSchema, path: string, unknown: string[], root: boolean) {
  if (Array.isArray(value)) {
    if (schema.items !== undefined)
      value.forEach((item, index) => {
        prune(item, schema.items ?? {}, `${path}[${index}]`, unknown, false)
      })
    return
  }
  if (!isObject(value)) return
  const keepsUnknown = schema["x-kubernetes-preserve-unknown-fields"] === true
  const embedded = schema["x-kubernetes-embedded-resource"] === true
  const properties = schema.properties
  const additional = schema.additionalProperties
  for (const key of Object.keys(value)) {
    if ((root || embedded) && (key === "apiVersion" || key === "kind" || key === "metadata")) continue
    const property = properties?.[key]
    if (property !== undefined) {
      prune(value[key], property, join(path, key), unknown, false)
    } else if (isObject(additional)) {
      prune(value[key], additional, join(path, key), unknown, false)
    } else if (!keepsUnknown && additional !== true) {
      delete value[key]
      unknown.push(join(path, key))
    }
  }
}

/** Drops nulls of non-nullable fields and fills in the schema's defaults, in place, as Kubernetes does on every write. */
export function applyDefaults(value: unknown, schema: JsonSchema): void {
  if (Array.isArray(value)) {
    const items = schema.items
    if (items !== undefined) for (const item of value) applyDefaults(item, items)
    return
  }
  if (!isObject(value)) return
  for (const [key, property] of Object.entries(schema.properties ?? {})) {
    if (value[key] === null && property.nullable !== true) delete value[key]
    if (value[key] === undefined && property.default !== undefined) value[key] = structuredClone(property.default)
    if (value[key] !== undefined) applyDefaults(value[key], property)
  }
  const additional = schema.additionalProperties
  if (isObject(additional)) {
    for (const key of Object.keys(value)) {
      if (schema.properties?.[key] !== undefined) continue
      if (value[key] === null && additional.nullable !== true) delete value[key]
      else applyDefaults(value[key], additional)
    }
  }
}

/**
 * The field errors of `value` against `schema`, in Kubernetes' wording.
 * `old` is the stored value at the same place, for transition rules; the only
 * `x-kubernetes-validations` rule understood without a CEL engine is the
 * immutability rule `self == oldSelf` (others are not evaluated).
 */
export function validateSchema(value: unknown, schema: JsonSchema, path: string, old?: unknown): FieldError[] {
  const errors: FieldError[] = []
  check(value, schema, path, old, errors)
  return errors
}

const jsonType = (value: unknown): string => {
  if (value === null) return "null"
  if (Array.isArray(value)) return "array"
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number"
  return typeof value
}

const typeError = (path: string, value: unknown, expected: string): FieldError => ({
  reason: "FieldValueTypeInvalid",
  field: path,
  message: `Invalid value: "${jsonType(value)}": ${path} in body must be of type ${expected}: "${jsonType(value)}"`,
})

function hasType(value: unknown, type: JsonSchema["type"]): boolean {
  switch (type) {
    case "object":
      return isObject(value)
    case "array":
      return Array.isArray(value)
    case "string":
      return typeof value === "string"
    case "integer":
      return typeof value === "number" && Number.isInteger(value)
    case "number":
      return typeof value === "number" && Number.isFinite(value)
    case "boolean":
      return typeof value === "boolean"
    default:
      return true
  }
}

const patterns = new Map<string, RegExp>()
function compiled(pattern: string): RegExp {
  let regex = patterns.get(pattern)
  if (regex === undefined) {
    regex = new RegExp(pattern, "u")
    patterns.set(pattern, regex)
  }
  return regex
}

const rfc3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/
const formats: Record<string, (value: unknown) => boolean> = {
  "date-time": (value) => typeof value === "string" && rfc3339.test(value) && !Number.isNaN(Date.parse(value)),
  date: (value) => typeof value === "string" && /^\d{4}-\d{2}-\d{2}$/.test(value),
  byte: (value) =>
    typeof value === "string" && /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(value),
  uuid: (value) =>
    typeof value === "string" && /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value),
  int32: (value) => typeof value !== "number" || (value >= -(2 ** 31) && value < 2 ** 31),
  int64: (value) => typeof value !== "number" || Number.isSafeInteger(value),
}

function check(value: unknown, schema: JsonSchema, path: string, old: unknown, errors: FieldError[]) {
  // The stored object itself, shared by a write that leaves it alone (a status write's spec): not checked
  // again, as Kubernetes ratchets validation of unchanged values; a status write then costs its status.
  if (value === old && typeof value === "object" && value !== null) return
  if (value === null) {
    if (schema.nullable !== true && schema.type !== undefined) errors.push(typeError(path, value, schema.type))
    return
  }
  if (schema["x-kubernetes-int-or-string"] === true) {
    if (!(typeof value === "string" || (typeof value === "number" && Number.isInteger(value)))) {
      errors.push(typeError(path, value, "integer,string"))
      return
    }
  } else if (!hasType(value, schema.type)) {
    errors.push(typeError(path, value, schema.type ?? "any"))
    return
  }
  if (schema.enum !== undefined && !schema.enum.some((allowed) => deepEqual(allowed, value))) {
    errors.push({
      reason: "FieldValueNotSupported",
      field: path,
      message: `Unsupported value: ${shownValue(value)}: supported values: ${schema.enum.map((allowed) => JSON.stringify(allowed)).join(", ")}`,
    })
  }
  if (typeof value === "string") checkString(value, schema, path, errors)
  if (typeof value === "number") checkNumber(value, schema, path, errors)
  if (schema.format !== undefined && formats[schema.format]?.(value) === false) {
    errors.push(fieldInvalid(path, value, `${path} in body must be of type ${schema.format}: ${shownValue(value)}`))
  }
  if (Array.isArray(value)) checkArray(value, schema, path, old, errors)
  if (isObject(value)) checkObject(value, schema, path, old, errors)
  checkCombinations(value, schema, path, old, errors)
  for (const validation of schema["x-kubernetes-validations"] ?? []) {
    if (/^\s*self\s*==\s*oldSelf\s*$/.test(validation.rule) && old !== undefined && !deepEqual(value, old)) {
      const field = validation.fieldPath === undefined ? path : `${path}${validation.fieldPath}`
      errors.push(fieldInvalid(field, value, validation.message ?? "Value is immutable"))
    }
  }
}

function checkString(value: string, schema: JsonSchema, path: string, errors: FieldError[]) {
  const length = [...value].length
  if (schema.minLength !== undefined && length < schema.minLength) {
    errors.push(fieldInvalid(path, value, `${path} in body should be at least ${schema.minLength} chars long`))
  }
  if (schema.maxLength !== undefined && length > schema.maxLength) {
    errors.push({
      reason: "FieldValueTooLong",
      field: path,
      message: `Too long: may not be more than ${schema.maxLength} bytes`,
    })
  }
  if (schema.pattern !== undefined && !compiled(schema.pattern).test(value)) {
    errors.push(fieldInvalid(path, value, `${path} in body should match '${schema.pattern}'`))
  }
}

function checkNumber(value: number, schema: JsonSchema, path: string, errors: FieldError[]) {
  if (schema.minimum !== undefined) {
    const below = schema.exclusiveMinimum === true ? value <= schema.minimum : value < schema.minimum
    if (below) {
      const relation = schema.exclusiveMinimum === true ? "greater than" : "greater than or equal to"
      errors.push(fieldInvalid(path, value, `${path} in body should be ${relation} ${schema.minimum}`))
    }
  }
  if (schema.maximum !== undefined) {
    const above = schema.exclusiveMaximum === true ? value >= schema.maximum : value > schema.maximum
    if (above) {
      const relation = schema.exclusiveMaximum === true ? "less than" : "less than or equal to"
      errors.push(fieldInvalid(path, value, `${path} in body should be ${relation} ${schema.maximum}`))
    }
  }
  if (schema.multipleOf !== undefined && value % schema.multipleOf !== 0) {
    errors.push(fieldInvalid(path, value, `${path} in body should be a multiple of ${schema.multipleOf}`))
  }
}

function checkArray(value: unknown[], schema: JsonSchema, path: string, old: unknown, errors: FieldError[]) {
  if (schema.minItems !== undefined && value.length < schema.minItems) {
    errors.push(fieldInvalid(path, value, `${path} in body should have at least ${schema.minItems} items`))
  }
  if (schema.maxItems !== undefined && value.length > schema.maxItems) {
    errors.push({
      reason: "FieldValueTooMany",
      field: path,
      message: `Too many: ${value.length}: must have at most ${schema.maxItems} items`,
    })
  }
  const listType = schema["x-kubernetes-list-type"]
  const mapKeys = schema["x-kubernetes-list-map-keys"] ?? []
  const identity = (item: unknown) =>
    listType === "map" && isObject(item)
      ? JSON.stringify(mapKeys.map((key) => item[key] ?? null))
      : JSON.stringify(item)
  if (listType === "set" || listType === "map" || schema.uniqueItems === true) {
    const seen = new Set<string>()
    value.forEach((item, index) => {
      const key = identity(item)
      if (seen.has(key)) {
        const shown =
          listType === "map" && isObject(item)
            ? mapKeys.map((name) => `${name}: ${JSON.stringify(item[name])}`).join(", ")
            : shownValue(item)
        errors.push({
          reason: "FieldValueDuplicate",
          field: `${path}[${index}]`,
          message: `Duplicate value: ${listType === "map" ? `{${shown}}` : shown}`,
        })
      }
      seen.add(key)
    })
  }
  const oldByKey = new Map<string, unknown>()
  if (listType === "map" && Array.isArray(old)) for (const item of old) oldByKey.set(identity(item), item)
  const items = schema.items
  if (items !== undefined) {
    value.forEach((item, index) => {
      check(item, items, `${path}[${index}]`, oldByKey.get(identity(item)), errors)
    })
  }
}

function checkObject(value: JsonObject, schema: JsonSchema, path: string, old: unknown, errors: FieldError[]) {
  const previous = isObject(old) ? old : undefined
  for (const key of schema.required ?? []) {
    if (value[key] === undefined) errors.push(fieldRequired(join(path, key)))
  }
  const count = Object.keys(value).length
  if (schema.minProperties !== undefined && count < schema.minProperties) {
    errors.push(fieldInvalid(path, value, `${path} in body should have at least ${schema.minProperties} properties`))
  }
  if (schema.maxProperties !== undefined && count > schema.maxProperties) {
    errors.push({
      reason: "FieldValueTooMany",
      field: path,
      message: `Too many: ${count}: must have at most ${schema.maxProperties} items`,
    })
  }
  const additional = schema.additionalProperties
  for (const [key, item] of Object.entries(value)) {
    if (item === undefined) continue
    const property = schema.properties?.[key]
    if (property !== undefined) check(item, property, join(path, key), previous?.[key], errors)
    else if (isObject(additional)) check(item, additional, `${path}[${key}]`, previous?.[key], errors)
  }
}

function checkCombinations(value: unknown, schema: JsonSchema, path: string, old: unknown, errors: FieldError[]) {
  for (const part of schema.allOf ?? []) check(value, part, path, old, errors)
  const passes = (part: JsonSchema) => validateSchema(value, part, path, old).length === 0
  if (schema.anyOf !== undefined && !schema.anyOf.some(passes)) {
    errors.push(fieldInvalid(path, value, `${path} in body must validate at least one schema (anyOf)`))
  }
  if (schema.oneOf !== undefined && schema.oneOf.filter(passes).length !== 1) {
    errors.push(fieldInvalid(path, value, `${path} in body must validate one and only one schema (oneOf)`))
  }
  if (schema.not !== undefined && passes(schema.not)) {
    errors.push(fieldInvalid(path, value, `${path} in body must not validate the schema (not)`))
  }
}

export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (Array.isArray(a))
    return Array.isArray(b) && a.length === b.length && a.every((item, index) => deepEqual(item, b[index]))
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a).filter((key) => a[key] !== undefined)
    const otherKeys = Object.keys(b).filter((key) => b[key] !== undefined)
    return keys.length === otherKeys.length && keys.every((key) => deepEqual(a[key], b[key]))
  }
  return false
}

/** A copy with object keys sorted at every level, as Kubernetes stores and returns custom resources. */
export function canonical<T>(value: T): T {
  if (Array.isArray(value)) return value.map(canonical) as T
  if (!isObject(value)) return value
  const out: JsonObject = {}
  for (const key of Object.keys(value).sort()) {
    if (value[key] !== undefined) out[key] = canonical(value[key])
  }
  return out as T
}
