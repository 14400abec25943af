import { sameSecret } from "../../../lib/crypto/same-secret.ts"
import { hasHeader, jsonBody, stringField } from "../request-fields.ts"
import { accepted, oneHeader, refused } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * Honeybadger: `Honeybadger-Token` carries the webhook secret itself, so a
 * request is refused unless the pipeline has a secret to compare it with.
 * The event is the body's `type`, else its `event` (`occurred`).
 */
export const honeybadger: WebhookProvider = {
  name: "honeybadger",
  secretRequired: true,
  matches: (request) => hasHeader(request, "honeybadger-token"),
  eventType: (request) => stringField(jsonBody(request), "type", "event"),
  verify(request, secret) {
    const token = oneHeader(request, "honeybadger-token", "Honeybadger-Token")
    if (typeof token !== "string") return token
    if (sameSecret(token, secret)) return accepted
    return refused("the Honeybadger-Token header does not match this pipeline's webhook secret")
  },
}
