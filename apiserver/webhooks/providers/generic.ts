import { headerValues, queryValues } from "../request-fields.ts"
import { accepted, digestMatches, hmacSha256, isHexDigest, mismatch, oneHeader, refused } from "../signature.ts"
import type { WebhookProvider } from "../webhook-provider.ts"

/**
 * Any other sender: the signature is the plain hex HMAC-SHA256 of the body, in
 * the `X-Webhook-Signature` header or, for senders that cannot set headers,
 * the `?signature=` query parameter. The header wins when both are sent.
 * There is no event type.
 */
export const generic: WebhookProvider = {
  name: "generic",
  secretRequired: false,
  matches: () => true,
  eventType: () => "",
  verify(request, secret) {
    let signature: string
    let where: string
    if (headerValues(request, "x-webhook-signature").length > 0) {
      const value = oneHeader(request, "x-webhook-signature", "X-Webhook-Signature")
      if (typeof value !== "string") return value
      signature = value
      where = "the X-Webhook-Signature header"
    } else {
      const values = queryValues(request, "signature")
      if (values.length === 0) {
        return refused(
          "the signature is missing; send the hex HMAC-SHA256 of the body in the X-Webhook-Signature header or the ?signature= query parameter",
        )
      }
      if (values.length > 1)
        return refused(`the ?signature= query parameter was sent ${values.length} times; send it once`)
      signature = (values[0] ?? "").trim()
      where = "the ?signature= query parameter"
    }
    if (!isHexDigest(signature)) return refused(`${where} is not 64 hex digits (HMAC-SHA256 of the body)`)
    return digestMatches(signature, hmacSha256(secret, request.rawBody)) ? accepted : mismatch(`${where}`)
  },
}
