import { firstHeader, hasHeader } from "../request-fields.ts"
import { verifyBodyHmac } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/** Bitbucket: `X-Event-Key` names the event (`repo:push`); `X-Hub-Signature: sha256=<hex>` signs the body. */
export const bitbucket: WebhookProvider = {
  name: "bitbucket",
  secretRequired: false,
  matches: (request) => hasHeader(request, "x-event-key"),
  eventType: (request) => firstHeader(request, "x-event-key"),
  verify: (request, secret) =>
    verifyBodyHmac(request, secret, { name: "x-hub-signature", display: "X-Hub-Signature", prefix: "sha256=" }),
}
