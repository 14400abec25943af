import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = Buffer.from([0x00, 0xff, 0xfe, 0x7b, 0x22]) // not UTF-8, not JSON: signed as bytes all the same

describe("generic webhooks", () => {
  it("are anything no provider claims, with an empty event type", () => {
    expect(detectProvider(webhookRequest({ "content-type": "application/json" }, '{"type":"push"}'))).toEqual({
      provider: "generic",
      eventType: "",
    })
  })

  it("accept the hex HMAC of the raw body in X-Webhook-Signature", () => {
    const request = webhookRequest({ "x-webhook-signature": hmacHex(secret, body) }, body)
    expect(verifyWebhook(request, "generic", secret, clock)).toEqual({ ok: true })
  })

  it("accept the hex HMAC of the raw body in ?signature=", () => {
    const request = webhookRequest({}, body, { signature: hmacHex(secret, body) })
    expect(verifyWebhook(request, "generic", secret, clock)).toEqual({ ok: true })
  })

  it("prefer the header when both are sent", () => {
    const request = webhookRequest({ "x-webhook-signature": "00".repeat(32) }, body, {
      signature: hmacHex(secret, body),
    })
    expect(refusal(verifyWebhook(request, "generic", secret, clock))).toMatch(
      /^the X-Webhook-Signature header does not match the body/,
    )
  })

  it("refuse a missing signature, naming both places it may be sent", () => {
    expect(refusal(verifyWebhook(webhookRequest({}, body), "generic", secret, clock))).toMatch(
      /^the signature is missing; send .* X-Webhook-Signature header or the \?signature= query parameter$/,
    )
  })

  it("refuse wrong, malformed and repeated signatures", () => {
    const wrongQuery = webhookRequest({}, body, { signature: hmacHex("other", body) })
    expect(refusal(verifyWebhook(wrongQuery, "generic", secret, clock), hmacHex(secret, body))).toMatch(
      /^the \?signature= query parameter does not match the body/,
    )
    const prefixed = webhookRequest({ "x-webhook-signature": `sha256=${hmacHex(secret, body)}` }, body)
    expect(refusal(verifyWebhook(prefixed, "generic", secret, clock))).toMatch(/is not 64 hex digits/)
    const repeated = webhookRequest({}, body, { signature: [hmacHex(secret, body), "x"] })
    expect(refusal(verifyWebhook(repeated, "generic", secret, clock))).toMatch(/sent 2 times/)
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({}, body), "generic", undefined, clock)).toEqual({ ok: true })
  })
})
