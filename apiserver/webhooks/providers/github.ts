import { firstHeader, hasHeader } from "../request-fields.ts"
import { verifyBodyHmac } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/** GitHub: `X-GitHub-Event` names the event; `X-Hub-Signature-256: sha256=<hex>` signs the body. */
export const github: WebhookProvider = {
  name: "github",
  secretRequired: false,
  matches: (request) => hasHeader(request, "x-github-event"),
  eventType: (request) => firstHeader(request, "x-github-event"),
  verify: (request, secret) =>
    verifyBodyHmac(request, secret, { name: "x-hub-signature-256", display: "X-Hub-Signature-256", prefix: "sha256=" }),
}
