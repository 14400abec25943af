import { webhookBodyAttachment } from "../../lib/core/webhook-request.ts"
import type { RunWebhook } from "../../lib/kube/resources.ts"
import type { NewRun } from "../new-run.ts"
import { detectProvider, type IncomingWebhook } from "./providers.ts"

/** Bodies above this stay out of the Run (its whole object is limited to about 1.5 MiB in etcd). */
export const maxBodyInRun = 512 * 1024

/**
 * Credentials a caller may send are not kept in the Run, where anyone who can
 * read Runs would see them; signatures are over the body and stay.
 */
const withheldHeaders = new Set(["authorization", "proxy-authorization", "cookie"])

/**
 * The run a webhook request starts: spec.trigger of type webhook with the
 * request as the pipeline's `http.request()` sees it (header names lower-case,
 * repeated headers and parameters joined with ", "), the body in the Run or,
 * above 512 KiB, in the log store.
 */
export function webhookRun(request: IncomingWebhook, by: string): NewRun {
  const { provider, eventType } = detectProvider(request)
  const body = request.rawBody.toString("utf8")
  const webhook: RunWebhook = {
    provider,
    eventType,
    method: request.method,
    url: request.url ?? "",
    headers: joined(request.headers, (name) => !withheldHeaders.has(name)),
    query: joined(request.query, () => true),
  }
  const stored = request.rawBody.length > maxBodyInRun
  if (stored) webhook.bodyStored = true
  else webhook.body = body
  return {
    type: "webhook",
    args: [],
    by,
    webhook,
    ...(stored ? { attachments: { [webhookBodyAttachment]: body } } : {}),
  }
}

function joined(
  values: Readonly<Record<string, string | string[] | undefined>>,
  keep: (name: string) => boolean,
): Record<string, string> {
  const result: Record<string, string> = {}
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined || !keep(name)) continue
    result[name] = Array.isArray(value) ? value.join(", ") : value
  }
  return result
}
