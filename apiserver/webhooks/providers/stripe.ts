import { hasHeader, jsonBody, stringField } from "../request-fields.ts"
import {
  accepted,
  checkTimestamp,
  digestMatches,
  hmacSha256,
  oneHeader,
  parseSeconds,
  refused,
  signingHint,
} from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * Stripe: `Stripe-Signature: t=<seconds>,v1=<hex>[,v1=<hex>...]`, each v1 an
 * HMAC-SHA256 of `<t>.<body>`. Any one v1 matching passes (Stripe signs with
 * both secrets while one is being rolled); other schemes (v0) are ignored, as
 * Stripe's library does. A timestamp outside the allowed age is a replay.
 * The event is the body's top-level `type` (`invoice.paid`).
 */
export const stripe: WebhookProvider = {
  name: "stripe",
  secretRequired: false,
  matches: (request) => hasHeader(request, "stripe-signature"),
  eventType: (request) => stringField(jsonBody(request), "type"),
  verify(request, secret, options) {
    const header = oneHeader(request, "stripe-signature", "Stripe-Signature")
    if (typeof header !== "string") return header
    const timestamps: string[] = []
    const signatures: string[] = []
    for (const item of header.split(",")) {
      const equals = item.indexOf("=")
      if (equals === -1) continue
      const key = item.slice(0, equals).trim()
      const value = item.slice(equals + 1).trim()
      if (key === "t") timestamps.push(value)
      else if (key === "v1") signatures.push(value)
    }
    if (timestamps.length === 0) return refused("the Stripe-Signature header has no t=<timestamp>")
    if (timestamps.length > 1) return refused("the Stripe-Signature header has more than one t=<timestamp>")
    const timestamp = timestamps[0] ?? ""
    const seconds = parseSeconds(timestamp)
    if (seconds === undefined) return refused("the Stripe-Signature t= value is not a whole number of seconds")
    if (signatures.length === 0) return refused("the Stripe-Signature header has no v1=<signature>")
    const expected = hmacSha256(secret, `${timestamp}.`, request.rawBody)
    // Every value is compared, matching or not, so the time taken does not tell which one matched.
    let matched = false
    for (const signature of signatures) matched = digestMatches(signature, expected) || matched
    if (!matched) return refused(`no v1= signature in the Stripe-Signature header matches the body; ${signingHint}`)
    const age = checkTimestamp(seconds, options, "the Stripe-Signature timestamp")
    return age.ok ? accepted : age
  },
}
