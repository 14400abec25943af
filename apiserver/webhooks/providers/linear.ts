import { hasHeader, jsonBody, stringField } from "../request-fields.ts"
import { verifyBodyHmac } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * Linear: `Linear-Signature` is the plain hex HMAC-SHA256 of the body; the event
 * is the body's `type` (`Issue`), else its `action` (`create`).
 */
export const linear: WebhookProvider = {
  name: "linear",
  secretRequired: false,
  matches: (request) => hasHeader(request, "linear-signature"),
  eventType: (request) => stringField(jsonBody(request), "type", "action"),
  verify: (request, secret) =>
    verifyBodyHmac(request, secret, { name: "linear-signature", display: "Linear-Signature", prefix: "" }),
}
