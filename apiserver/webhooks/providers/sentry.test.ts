import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = JSON.stringify({ action: "created", data: { issue: { id: "1" } } })

describe("sentry webhooks", () => {
  it("are detected by Sentry-Hook-Signature; the event type is the Sentry-Hook-Resource header", () => {
    const request = webhookRequest({ "sentry-hook-signature": "", "sentry-hook-resource": "issue" }, body)
    expect(detectProvider(request)).toEqual({ provider: "sentry", eventType: "issue" })
  })

  it("fall back to the body's action, then its type", () => {
    expect(detectProvider(webhookRequest({ "sentry-hook-signature": "" }, body)).eventType).toBe("created")
    expect(detectProvider(webhookRequest({ "sentry-hook-signature": "" }, '{"type":"alert"}')).eventType).toBe("alert")
  })

  it("accept the plain hex HMAC of the body", () => {
    const request = webhookRequest({ "sentry-hook-signature": hmacHex(secret, body) }, body)
    expect(verifyWebhook(request, "sentry", secret, clock)).toEqual({ ok: true })
  })

  it("refuse a missing or wrong signature when a secret is set", () => {
    expect(refusal(verifyWebhook(webhookRequest({}, body), "sentry", secret, clock))).toBe(
      "the Sentry-Hook-Signature header is missing",
    )
    const wrong = webhookRequest({ "sentry-hook-signature": hmacHex(secret, `${body}\n`) }, body)
    expect(refusal(verifyWebhook(wrong, "sentry", secret, clock), hmacHex(secret, body))).toMatch(
      /^the Sentry-Hook-Signature signature does not match the body/,
    )
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({ "sentry-hook-signature": "" }, body), "sentry", undefined, clock).ok).toBe(
      true,
    )
  })
})
