import type { KubeObject } from "./object-meta.ts"
import type { KubeList } from "./resource-api.ts"
import type { PrinterColumn, ResourceType } from "./resource-types.ts"
import { podType, secretType } from "./resource-types.ts"
import { isObject } from "./schema.ts"

/**
 * Server-side printing: what `kubectl get` shows, as a `meta.k8s.io/v1`
 * Table built from the type's printer columns (a CRD's
 * `additionalPrinterColumns`), with Name first and dates shown as ages.
 */

export type IncludeObject = "None" | "Metadata" | "Object"

const nameColumn = {
  name: "Name",
  type: "string",
  format: "name",
  description: "Name must be unique within a namespace. Cannot be updated.",
  priority: 0,
}

export function toTable(type: ResourceType, list: KubeList, include: IncludeObject, now = new Date()) {
  return {
    kind: "Table",
    apiVersion: "meta.k8s.io/v1",
    metadata: list.metadata,
    columnDefinitions: [
      nameColumn,
      ...type.printerColumns.map((column) => ({
        name: column.name,
        type: column.type,
        format: column.format ?? "",
        description: column.description ?? "",
        priority: column.priority,
      })),
    ],
    rows: list.items.map((object) => ({
      cells: [object.metadata.name ?? "", ...type.printerColumns.map((column) => cell(type, column, object, now))],
      object: rowObject(object, include),
    })),
  }
}

function rowObject(object: KubeObject, include: IncludeObject) {
  if (include === "None") return undefined
  if (include === "Object") return object
  return { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: object.metadata }
}

function cell(type: ResourceType, column: PrinterColumn, object: KubeObject, now: Date): unknown {
  if (type === secretType && column.name === "Data") return isObject(object.data) ? Object.keys(object.data).length : 0
  if (type === podType && column.name !== "Age" && column.jsonPath === ".status.containerStatuses") {
    return podCell(column.name, object)
  }
  if (type === podType && column.name === "Status") return podStatus(object)
  let values: unknown[]
  try {
    values = evaluateJsonPath(column.jsonPath, object)
  } catch {
    return "<invalid>"
  }
  const value = values[0]
  if (value === undefined || value === null) return null
  switch (column.type) {
    case "date":
      return typeof value === "string" && !Number.isNaN(Date.parse(value))
        ? humanDuration(now.getTime() - Date.parse(value))
        : "<invalid>"
    case "integer":
    case "number":
      return typeof value === "number" ? value : null
    case "boolean":
      return typeof value === "boolean" ? value : null
    default:
      return values.map((item) => (typeof item === "string" ? item : JSON.stringify(item))).join(" ")
  }
}

/** Kubernetes' HumanDuration: 42s, 5m3s, 3h20m, 2d5h, 400d, 3y20d. */
export function humanDuration(milliseconds: number): string {
  const seconds = Math.floor(milliseconds / 1000)
  if (seconds < -1) return "<invalid>"
  if (seconds < 0) return "0s"
  if (seconds < 60 * 2) return `${seconds}s`
  const minutes = Math.floor(seconds / 60)
  if (minutes < 10) return seconds % 60 === 0 ? `${minutes}m` : `${minutes}m${seconds % 60}s`
  if (minutes < 60 * 3) return `${minutes}m`
  const hours = Math.floor(minutes / 60)
  if (hours < 8) return minutes % 60 === 0 ? `${hours}h` : `${hours}h${minutes % 60}m`
  if (hours < 48) return `${hours}h`
  if (hours < 24 * 8)
    return hours % 24 === 0 ? `${Math.floor(hours / 24)}d` : `${Math.floor(hours / 24)}d${hours % 24}h`
  if (hours < 24 * 365 * 2) return `${Math.floor(hours / 24)}d`
  if (hours < 24 * 365 * 8) {
    const days = Math.floor(hours / 24) % 365
    return days === 0 ? `${Math.floor(hours / 24 / 365)}y` : `${Math.floor(hours / 24 / 365)}y${days}d`
  }
  return `${Math.floor(hours / 24 / 365)}y`
}

/**
 * The JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*]`, `.a['b']`
 * and filters `[?(@.k=="v")]`, `[?(@.k!="v")]`, optionally in `{...}`.
 */
export function evaluateJsonPath(path: string, root: unknown): unknown[] {
  let text = path.trim()
  if (text.startsWith("{") && text.endsWith("}")) text = text.slice(1, -1)
  if (text.startsWith("$")) text = text.slice(1)
  let nodes: unknown[] = [root]
  let index = 0
  while (index < text.length) {
    const char = text[index]
    if (char === ".") {
      const match = /^\.([A-Za-z0-9_-]+)/.exec(text.slice(index))
      if (match === null) throw new Error(`unexpected "${text.slice(index)}" in JSONPath ${path}`)
      nodes = nodes.flatMap((node) =>
        isObject(node) && node[match[1] ?? ""] !== undefined ? [node[match[1] ?? ""]] : [],
      )
      index += match[0].length
    } else if (char === "[") {
      const close = findClose(text, index)
      const inside = text.slice(index + 1, close).trim()
      nodes = nodes.flatMap((node) => select(node, inside, path))
      index = close + 1
    } else {
      throw new Error(`unexpected "${text.slice(index)}" in JSONPath ${path}`)
    }
  }
  return nodes
}

function findClose(text: string, open: number): number {
  let depth = 0
  let quote: string | undefined
  for (let index = open; index < text.length; index++) {
    const char = text[index]
    if (quote !== undefined) {
      if (char === quote) quote = undefined
    } else if (char === '"' || char === "'") quote = char
    else if (char === "[") depth++
    else if (char === "]" && --depth === 0) return index
  }
  throw new Error("unclosed [ in JSONPath")
}

function select(node: unknown, inside: string, path: string): unknown[] {
  if (inside === "*") return Array.isArray(node) ? node : isObject(node) ? Object.values(node) : []
  if (/^-?\d+$/.test(inside)) {
    if (!Array.isArray(node)) return []
    const position = Number(inside)
    const item = node[position < 0 ? node.length + position : position]
    return item === undefined ? [] : [item]
  }
  const quoted = /^['"](.*)['"]$/.exec(inside)
  if (quoted !== null) return isObject(node) && node[quoted[1] ?? ""] !== undefined ? [node[quoted[1] ?? ""]] : []
  const filter =
    /^\?\(@((?:\.[A-Za-z0-9_-]+)+)\s*(==|!=)\s*(?:"([^"]*)"|'([^']*)'|(-?\d+(?:\.\d+)?|true|false))\)$/.exec(inside)
  if (filter !== null) {
    const items = Array.isArray(node) ? node : []
    const expected: unknown = filter[3] ?? filter[4] ?? JSON.parse(filter[5] ?? "null")
    return items.filter((item) => {
      const found = evaluateJsonPath(filter[1] ?? "", item)[0]
      return (found === expected) === (filter[2] === "==")
    })
  }
  throw new Error(`unsupported JSONPath expression [${inside}] in ${path}`)
}

type ContainerStatus = { ready?: boolean; restartCount?: number; state?: Record<string, { reason?: string }> }

/** READY (ready/all) and RESTARTS, as kubectl's own Pod printer shows them. */
function podCell(name: string, pod: KubeObject): string | number {
  const statuses = (
    isObject(pod.status) && Array.isArray(pod.status.containerStatuses) ? pod.status.containerStatuses : []
  ) as ContainerStatus[]
  const containers = isObject(pod.spec) && Array.isArray(pod.spec.containers) ? pod.spec.containers.length : 0
  if (name === "Ready") return `${statuses.filter((status) => status.ready === true).length}/${containers}`
  return statuses.reduce((sum, status) => sum + (status.restartCount ?? 0), 0)
}

/** STATUS as kubectl prints it: a waiting or terminated container's reason, Terminating, else the phase. */
function podStatus(pod: KubeObject): string {
  const status = isObject(pod.status) ? pod.status : {}
  let shown = String(status.phase ?? "Pending")
  const statuses = (Array.isArray(status.containerStatuses) ? status.containerStatuses : []) as ContainerStatus[]
  for (const container of statuses) {
    const reason = container.state?.waiting?.reason ?? container.state?.terminated?.reason
    if (reason !== undefined && reason !== "" && container.state?.running === undefined) shown = reason
  }
  if (pod.metadata.deletionTimestamp !== undefined) shown = "Terminating"
  return shown
}
