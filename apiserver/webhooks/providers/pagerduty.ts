import { hasHeader, isObject, jsonBody, stringField } from "../request-fields.ts"
import { accepted, digestMatches, hmacSha256, oneHeader, refused, signingHint } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * PagerDuty: `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>...]`, each an
 * HMAC-SHA256 of the body; any one matching passes (PagerDuty signs with every
 * secret during a rotation). The event is the `event` of the first of
 * `messages` (v2 webhooks), else the top-level `event`, else `type`.
 */
export const pagerduty: WebhookProvider = {
  name: "pagerduty",
  secretRequired: false,
  matches: (request) => hasHeader(request, "x-pagerduty-signature"),
  eventType(request) {
    const body = jsonBody(request)
    const messages = body?.messages
    const first: unknown = Array.isArray(messages) ? messages[0] : undefined
    // V3 webhooks send `event` as an object whose `event_type` (`incident.triggered`) is the name.
    const event = isObject(body?.event) ? stringField(body.event, "event_type") : ""
    return stringField(first, "event") || stringField(body, "event") || event || stringField(body, "type")
  },
  verify(request, secret) {
    const header = oneHeader(request, "x-pagerduty-signature", "X-PagerDuty-Signature")
    if (typeof header !== "string") return header
    const signatures = header
      .split(",")
      .map((item) => item.trim())
      .filter((item) => item.startsWith("v1="))
      .map((item) => item.slice(3))
    if (signatures.length === 0) return refused("the X-PagerDuty-Signature header has no v1=<signature>")
    const expected = hmacSha256(secret, request.rawBody)
    // Every value is compared, matching or not, so the time taken does not tell which one matched.
    let matched = false
    for (const signature of signatures) matched = digestMatches(signature, expected) || matched
    return matched
      ? accepted
      : refused(`no v1= signature in the X-PagerDuty-Signature header matches the body; ${signingHint}`)
  },
}
