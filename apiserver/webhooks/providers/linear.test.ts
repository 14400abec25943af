import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = JSON.stringify({ action: "create", type: "Issue", data: { title: "Fix ✓" } })

describe("linear webhooks", () => {
  it("are detected by Linear-Signature; the event type is the body's type, else its action", () => {
    expect(detectProvider(webhookRequest({ "linear-signature": "" }, body))).toEqual({
      provider: "linear",
      eventType: "Issue",
    })
    expect(detectProvider(webhookRequest({ "linear-signature": "" }, '{"action":"remove"}')).eventType).toBe("remove")
    expect(detectProvider(webhookRequest({ "linear-signature": "" }, '{"type":7,"action":"update"}')).eventType).toBe(
      "update",
    )
  })

  it("accept the plain hex HMAC of the body", () => {
    const request = webhookRequest({ "linear-signature": hmacHex(secret, body) }, body)
    expect(verifyWebhook(request, "linear", secret, clock)).toEqual({ ok: true })
  })

  it("refuse a missing or wrong signature when a secret is set", () => {
    expect(refusal(verifyWebhook(webhookRequest({}, body), "linear", secret, clock))).toBe(
      "the Linear-Signature header is missing",
    )
    const wrong = webhookRequest({ "linear-signature": hmacHex("other", body) }, body)
    expect(refusal(verifyWebhook(wrong, "linear", secret, clock), hmacHex(secret, body))).toMatch(
      /^the Linear-Signature signature does not match the body/,
    )
    const prefixed = webhookRequest({ "linear-signature": `sha256=${hmacHex(secret, body)}` }, body)
    expect(refusal(verifyWebhook(prefixed, "linear", secret, clock))).toMatch(/is not <64 hex digits>/)
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({ "linear-signature": "" }, body), "linear", undefined, clock).ok).toBe(true)
  })
})
