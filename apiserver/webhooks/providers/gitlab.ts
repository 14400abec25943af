import { sameSecret } from "../../../lib/crypto/same-secret.ts"
import { firstHeader, hasHeader } from "../request-fields.ts"
import { accepted, digestMatches, hmacSha256, oneHeader, refused } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * GitLab: `X-Gitlab-Event` names the event (`Push Hook`). `X-Gitlab-Token`
 * carries either `sha256=<hex>`, the HMAC-SHA256 of the body, or the secret
 * itself (GitLab's own scheme, which it still sends). A value of the HMAC's
 * form is checked both ways, so a secret that happens to begin with
 * "sha256=" still works as a plain token.
 */
export const gitlab: WebhookProvider = {
  name: "gitlab",
  secretRequired: false,
  matches: (request) => hasHeader(request, "x-gitlab-event"),
  eventType: (request) => firstHeader(request, "x-gitlab-event"),
  verify(request, secret) {
    const token = oneHeader(request, "x-gitlab-token", "X-Gitlab-Token")
    if (typeof token !== "string") return token
    const hmac = token.startsWith("sha256=") && digestMatches(token.slice(7), hmacSha256(secret, request.rawBody))
    // Both checks always run, so the time taken does not tell which form was tried.
    const plain = sameSecret(token, secret)
    if (hmac || plain) return accepted
    return refused(
      "the X-Gitlab-Token header is neither the webhook secret nor sha256=<HMAC-SHA256 of the body>; check that the sender uses this pipeline's webhook secret",
    )
  },
}
