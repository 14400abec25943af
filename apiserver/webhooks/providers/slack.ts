import { hasHeader, jsonBody, stringField } from "../request-fields.ts"
import {
  accepted,
  checkTimestamp,
  digestMatches,
  hmacSha256,
  isHexDigest,
  mismatch,
  oneHeader,
  parseSeconds,
  refused,
} from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * Slack: `X-Slack-Signature: v0=<hex>` is the HMAC-SHA256 of
 * `v0:<X-Slack-Request-Timestamp>:<body>`. Both headers are required, and a
 * timestamp outside the allowed age is a replay, as Slack's own SDKs refuse.
 * The event is the body's top-level `type` (`event_callback`, `url_verification`).
 */
export const slack: WebhookProvider = {
  name: "slack",
  secretRequired: false,
  matches: (request) => hasHeader(request, "x-slack-signature"),
  eventType: (request) => stringField(jsonBody(request), "type"),
  verify(request, secret, options) {
    const signature = oneHeader(request, "x-slack-signature", "X-Slack-Signature")
    if (typeof signature !== "string") return signature
    const timestamp = oneHeader(request, "x-slack-request-timestamp", "X-Slack-Request-Timestamp")
    if (typeof timestamp !== "string") return timestamp
    const seconds = parseSeconds(timestamp)
    if (seconds === undefined) return refused("the X-Slack-Request-Timestamp header is not a whole number of seconds")
    const hex = signature.startsWith("v0=") ? signature.slice(3) : ""
    if (!isHexDigest(hex)) return refused("the X-Slack-Signature header is not v0=<64 hex digits>")
    const expected = hmacSha256(secret, `v0:${timestamp}:`, request.rawBody)
    if (!digestMatches(hex, expected)) return mismatch("the X-Slack-Signature signature")
    // Checked once the signature holds, so the age reported is that of a genuine request.
    const age = checkTimestamp(seconds, options, "the X-Slack-Request-Timestamp")
    return age.ok ? accepted : age
  },
}
