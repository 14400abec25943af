import { firstHeader, hasHeader, jsonBody, stringField } from "../request-fields.ts"
import { verifyBodyHmac } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * Sentry: `Sentry-Hook-Signature` is the plain hex HMAC-SHA256 of the body; the
 * event is the `Sentry-Hook-Resource` header (`issue`), else the body's
 * `action`, else its `type`.
 */
export const sentry: WebhookProvider = {
  name: "sentry",
  secretRequired: false,
  matches: (request) => hasHeader(request, "sentry-hook-signature"),
  eventType: (request) =>
    firstHeader(request, "sentry-hook-resource") || stringField(jsonBody(request), "action", "type"),
  verify: (request, secret) =>
    verifyBodyHmac(request, secret, { name: "sentry-hook-signature", display: "Sentry-Hook-Signature", prefix: "" }),
}
