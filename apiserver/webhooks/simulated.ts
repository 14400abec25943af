import { badRequest } from "../../lib/core/errors.ts"
import type { IncomingWebhook } from "./webhook-provider.ts"

const methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

/**
 * The request a quick trigger of mode `webhook` describes
 * (`{"webhook": {"method", "headers", "body"}}`): the pipeline runs as if it
 * had arrived. A body given as JSON rather than text is sent as its JSON text.
 */
export function simulatedWebhook(value: unknown): IncomingWebhook {
  if (value === undefined || value === null) return { method: "POST", headers: {}, rawBody: Buffer.alloc(0), query: {} }
  if (typeof value !== "object" || Array.isArray(value)) {
    throw badRequest('"webhook" must be an object: {"method": "POST", "headers": {...}, "body": "..."}')
  }
  const { method = "POST", headers = {}, body = "", ...rest } = value as Record<string, unknown>
  const unknown = Object.keys(rest)
  if (unknown.length > 0) {
    throw badRequest(`unknown field "webhook.${unknown[0]}"; known: method, headers, body`)
  }
  if (typeof method !== "string" || !methods.includes(method.toUpperCase())) {
    throw badRequest(`"webhook.method" must be an HTTP method: ${methods.join(", ")}`)
  }
  if (headers === null || typeof headers !== "object" || Array.isArray(headers)) {
    throw badRequest('"webhook.headers" must be an object of header names to string values')
  }
  const lowered: Record<string, string> = {}
  for (const [name, header] of Object.entries(headers)) {
    if (typeof header !== "string") throw badRequest(`"webhook.headers" value of "${name}" must be a string`)
    lowered[name.toLowerCase()] = header
  }
  const text = typeof body === "string" ? body : JSON.stringify(body)
  return { method: method.toUpperCase(), headers: lowered, rawBody: Buffer.from(text, "utf8"), query: {} }
}
