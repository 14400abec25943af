import type { IncomingWebhook } from "./webhook-provider.ts"

/**
 * Every value a header or query parameter has, from the node:http form
 * (undefined, a string, or an array for a repeated one). An own-property
 * read, so a name like "constructor" is never found on the prototype.
 */
function valuesOf(record: Readonly<Record<string, string | string[] | undefined>>, name: string): string[] {
  if (!Object.hasOwn(record, name)) return []
  const value = record[name]
  if (value === undefined) return []
  return Array.isArray(value) ? value.filter((item) => typeof item === "string") : [value]
}

export function headerValues(request: Pick<IncomingWebhook, "headers">, name: string): string[] {
  return valuesOf(request.headers, name)
}

export function queryValues(request: IncomingWebhook, name: string): string[] {
  return valuesOf(request.query, name)
}

/** True when the header was sent, even empty: detection is by presence. */
export function hasHeader(request: Pick<IncomingWebhook, "headers">, name: string): boolean {
  return headerValues(request, name).length > 0
}

/** The header's first value, "" when absent: for event types, where a repeated header is not a security question. */
export function firstHeader(request: IncomingWebhook, name: string): string {
  return headerValues(request, name)[0] ?? ""
}

const parsedBodies = new WeakMap<IncomingWebhook, Record<string, unknown> | undefined>()

/** The body as a JSON object, or undefined when it is not one (not JSON, an array, a scalar). Never throws. */
export function jsonBody(request: IncomingWebhook): Record<string, unknown> | undefined {
  if (parsedBodies.has(request)) return parsedBodies.get(request)
  let body: Record<string, unknown> | undefined
  try {
    // A leading byte-order mark is legal UTF-8 but not legal JSON.
    const parsed: unknown = JSON.parse(request.rawBody.toString("utf8").replace(/^\uFEFF/, ""))
    body = isObject(parsed) ? parsed : undefined
  } catch {
    body = undefined
  }
  parsedBodies.set(request, body)
  return body
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value)
}

/**
 * The first of `fields` that holds a non-empty string in `object`, else "".
 * Only strings count: a number or an object in a field named `type` is not an
 * event type, and the next field is tried.
 */
export function stringField(object: unknown, ...fields: string[]): string {
  if (!isObject(object)) return ""
  for (const field of fields) {
    const value = Object.hasOwn(object, field) ? object[field] : undefined
    if (typeof value === "string" && value !== "") return value
  }
  return ""
}
