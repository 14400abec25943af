import { deepEqual, isObject } from "./schema.ts"

/**
 * The patch formats the embedded API accepts. Each returns a new document and
 * leaves its inputs alone; a patch that cannot apply throws `PatchError`.
 */

export class PatchError extends Error {
  /** 400: the patch itself is malformed; 422: it is well formed but does not apply (a failed `test`, a missing path). */
  readonly status: 400 | 422
  constructor(status: 400 | 422, message: string) {
    super(message)
    this.name = "PatchError"
    this.status = status
  }
}

/** RFC 7386 JSON merge patch: objects merge, `null` deletes, everything else (arrays included) replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return structuredClone(patch)
  const out: Record<string, unknown> = isObject(target) ? { ...target } : {}
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key]
    else out[key] = mergePatch(out[key], value)
  }
  return out
}

type Operation = { op: string; path: string; from?: string; value?: unknown }

function pointer(path: unknown, what: string): string[] {
  if (typeof path !== "string") throw new PatchError(400, `${what} must be a string JSON pointer`)
  if (path === "") return []
  if (!path.startsWith("/")) throw new PatchError(400, `JSON pointer "${path}" must start with "/"`)
  return path
    .slice(1)
    .split("/")
    .map((token) => token.replaceAll("~1", "/").replaceAll("~0", "~"))
}

function arrayIndex(array: unknown[], token: string, path: string, forAdd: boolean): number {
  if (forAdd && token === "-") return array.length
  if (!/^(0|[1-9]\d*)$/.test(token)) throw new PatchError(422, `invalid array index "${token}" in "${path}"`)
  const index = Number(token)
  if (index > array.length || (!forAdd && index === array.length)) {
    throw new PatchError(422, `index ${index} is out of bounds of the array at "${path}"`)
  }
  return index
}

/** The container of the location `tokens` names, and the last token. */
function parentOf(doc: unknown, tokens: string[], path: string): { parent: unknown; last: string } {
  let node = doc
  for (const token of tokens.slice(0, -1)) {
    if (Array.isArray(node)) node = node[arrayIndex(node, token, path, false)]
    else if (isObject(node) && token in node) node = node[token]
    else throw new PatchError(422, `doc is missing path: "${path}"`)
  }
  return { parent: node, last: tokens[tokens.length - 1] ?? "" }
}

function read(doc: unknown, path: string): unknown {
  let node = doc
  for (const token of pointer(path, "path")) {
    if (Array.isArray(node)) node = node[arrayIndex(node, token, path, false)]
    else if (isObject(node) && token in node) node = node[token]
    else throw new PatchError(422, `doc is missing path: "${path}"`)
  }
  return node
}

function add(doc: unknown, path: string, value: unknown): unknown {
  const tokens = pointer(path, "path")
  if (tokens.length === 0) return value
  const { parent, last } = parentOf(doc, tokens, path)
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, last, path, true), 0, value)
  else if (isObject(parent)) parent[last] = value
  else throw new PatchError(422, `doc is missing path: "${path}"`)
  return doc
}

function remove(doc: unknown, path: string): unknown {
  const tokens = pointer(path, "path")
  if (tokens.length === 0) return undefined
  const { parent, last } = parentOf(doc, tokens, path)
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, last, path, false), 1)
  else if (isObject(parent) && last in parent) delete parent[last]
  else throw new PatchError(422, `Unable to remove nonexistent key: ${last}: missing value`)
  return doc
}

/** RFC 6902 JSON patch: add, remove, replace, move, copy, test. */
export function jsonPatch(target: unknown, operations: unknown): unknown {
  if (!Array.isArray(operations)) throw new PatchError(400, "a JSON patch must be an array of operations")
  let doc = structuredClone(target)
  for (const raw of operations) {
    if (!isObject(raw)) throw new PatchError(400, "each JSON patch operation must be an object")
    const operation = raw as Operation
    if ((operation.op === "add" || operation.op === "replace" || operation.op === "test") && !("value" in raw)) {
      throw new PatchError(400, `${operation.op} operation does not apply: missing value`)
    }
    switch (operation.op) {
      case "add":
        doc = add(doc, operation.path, structuredClone(operation.value))
        break
      case "remove":
        doc = remove(doc, operation.path)
        break
      case "replace":
        read(doc, operation.path)
        doc = add(remove(doc, operation.path), operation.path, structuredClone(operation.value))
        break
      case "move": {
        pointer(operation.from, "from")
        const value = read(doc, operation.from ?? "")
        doc = add(remove(doc, operation.from ?? ""), operation.path, value)
        break
      }
      case "copy":
        doc = add(doc, operation.path, structuredClone(read(doc, operation.from ?? "")))
        break
      case "test":
        if (!deepEqual(read(doc, operation.path), operation.value)) {
          throw new PatchError(422, `testing value ${operation.path} failed: test failed`)
        }
        break
      default:
        throw new PatchError(400, `Unexpected kind: ${String(operation.op)}`)
    }
  }
  return doc
}

/** Lists of core kinds that strategic merge patch merges by a key instead of replacing. */
const mergeKeys: Record<string, string | null> = {
  "metadata.ownerReferences": "uid",
  "metadata.finalizers": null,
}

/**
 * Strategic merge patch for the core kinds served here (Secret, Namespace):
 * a merge patch in which `metadata.ownerReferences` merge by uid and
 * `metadata.finalizers` as a set, honouring `$patch: delete|replace`,
 * `$deleteFromPrimitiveList/finalizers` and skipping `$setElementOrder`
 * and `$retainKeys` (order and retained keys do not change the result for
 * these kinds). Custom resources refuse it with 415, as in Kubernetes.
 */
export function strategicMergePatch(target: unknown, patch: unknown, path = ""): unknown {
  if (!isObject(patch)) return structuredClone(patch)
  if (patch.$patch === "replace") {
    const { $patch: _, ...rest } = patch
    return structuredClone(rest)
  }
  if (patch.$patch === "delete") return undefined
  const out: Record<string, unknown> = isObject(target) ? { ...target } : {}
  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith("$setElementOrder/") || key === "$retainKeys" || key === "$patch") continue
    if (key.startsWith("$deleteFromPrimitiveList/")) {
      const listKey = key.slice("$deleteFromPrimitiveList/".length)
      const current = out[listKey]
      if (Array.isArray(current) && Array.isArray(value)) out[listKey] = current.filter((item) => !value.includes(item))
      continue
    }
    const field = path === "" ? key : `${path}.${key}`
    if (value === null) {
      delete out[key]
    } else if (field in mergeKeys && Array.isArray(value)) {
      out[key] = mergeList(out[key], value, mergeKeys[field] ?? null)
    } else {
      const merged = strategicMergePatch(out[key], value, field)
      if (merged === undefined) delete out[key]
      else out[key] = merged
    }
  }
  return out
}

function mergeList(current: unknown, patch: unknown[], key: string | null): unknown[] {
  const list = Array.isArray(current) ? [...current] : []
  for (const item of patch) {
    if (key === null) {
      if (!list.includes(item)) list.push(item)
      continue
    }
    if (!isObject(item)) continue
    const index = list.findIndex((existing) => isObject(existing) && existing[key] === item[key])
    if (item.$patch === "delete") {
      if (index !== -1) list.splice(index, 1)
    } else if (index === -1) {
      list.push(structuredClone(item))
    } else {
      list[index] = mergePatch(list[index], item)
    }
  }
  return list
}
