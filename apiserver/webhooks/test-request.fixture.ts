// Shared by the webhook tests: requests in node:http's form, a fixed clock, and
// the documented HMAC computed here with node:crypto, independently of signature.ts.
import { createHmac } from "node:crypto"
import { expect } from "vitest"
import type { IncomingWebhook, Verification, VerifyOptions } from "./webhook-provider.ts"

export const secret = "It's a Secret to Everybody"
export const now = new Date("2025-06-01T12:00:00Z")
export const nowSeconds = Math.floor(now.getTime() / 1000)
export const clock: VerifyOptions = { now, maxAgeMs: 5 * 60_000 }

export function webhookRequest(
  headers: IncomingWebhook["headers"],
  body: string | Buffer = "{}",
  query: IncomingWebhook["query"] = {},
): IncomingWebhook {
  return { method: "POST", headers, rawBody: Buffer.from(body), query, url: "/api/webhooks/demo" }
}

export function hmacHex(key: string, data: string | Buffer): string {
  return createHmac("sha256", key).update(data).digest("hex")
}

/** The refusal's message, after checking it is one and that it gives nothing away. */
export function refusal(result: Verification, ...forbidden: string[]): string {
  expect(result.ok).toBe(false)
  const message = result.ok ? "" : result.message
  for (const text of [secret, ...forbidden]) expect(message).not.toContain(text)
  return message
}
