import Stripe from "stripe"
import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, nowSeconds, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = JSON.stringify({ id: "evt_1", object: "event", type: "invoice.paid", data: { object: { note: "€" } } })

/** The header Stripe's own library makes for tests. */
function stripeHeader(timestamp = nowSeconds, key = secret): string {
  return Stripe.webhooks.generateTestHeaderString({ payload: body, secret: key, timestamp })
}

describe("stripe webhooks", () => {
  it("are detected by Stripe-Signature; the event type is the body's type", () => {
    expect(detectProvider(webhookRequest({ "stripe-signature": stripeHeader() }, body))).toEqual({
      provider: "stripe",
      eventType: "invoice.paid",
    })
  })

  it("accept the Stripe-Signature that Stripe's own library makes", () => {
    const request = webhookRequest({ "stripe-signature": stripeHeader(nowSeconds - 60) }, body)
    expect(verifyWebhook(request, "stripe", secret, clock)).toEqual({ ok: true })
  })

  it("accept when any one of several v1 values matches (secret rotation)", () => {
    const t = nowSeconds
    const header = `t=${t},v1=${hmacHex("old secret", `${t}.${body}`)},v1=${hmacHex(secret, `${t}.${body}`)},v0=zz`
    expect(verifyWebhook(webhookRequest({ "stripe-signature": header }, body), "stripe", secret, clock)).toEqual({
      ok: true,
    })
  })

  it("refuse a request without Stripe-Signature when a secret is set", () => {
    expect(refusal(verifyWebhook(webhookRequest({}, body), "stripe", secret, clock))).toBe(
      "the Stripe-Signature header is missing",
    )
  })

  it("refuse when no v1 value matches, without showing the expected one", () => {
    const request = webhookRequest({ "stripe-signature": stripeHeader(nowSeconds, "whsec_other") }, body)
    expect(refusal(verifyWebhook(request, "stripe", secret, clock), hmacHex(secret, `${nowSeconds}.${body}`))).toMatch(
      /^no v1= signature in the Stripe-Signature header matches the body/,
    )
  })

  it("refuse a genuine request older than the allowed age as a replay", () => {
    const request = webhookRequest({ "stripe-signature": stripeHeader(nowSeconds - 7 * 60) }, body)
    expect(refusal(verifyWebhook(request, "stripe", secret, clock))).toBe(
      "the Stripe-Signature timestamp is 7m0s old; older than 5m0s is refused as a replay",
    )
  })

  it("refuse a timestamp too far in the future, and honour a longer allowed age", () => {
    const request = webhookRequest({ "stripe-signature": stripeHeader(nowSeconds + 10 * 60) }, body)
    expect(refusal(verifyWebhook(request, "stripe", secret, clock))).toMatch(/is 10m0s in the future/)
    expect(verifyWebhook(request, "stripe", secret, { now: clock.now, maxAgeMs: 15 * 60_000 }).ok).toBe(true)
  })

  it("refuse malformed headers cleanly", () => {
    const v1 = hmacHex(secret, `${nowSeconds}.${body}`)
    const cases: [string, RegExp][] = [
      [`v1=${v1}`, /has no t=<timestamp>/],
      [`t=abc,v1=${v1}`, /t= value is not a whole number of seconds/],
      [`t=${nowSeconds},t=${nowSeconds},v1=${v1}`, /more than one t=/],
      [`t=${nowSeconds}`, /has no v1=<signature>/],
      [`t=${nowSeconds},v1=zz`, /matches the body/],
      [`t=${nowSeconds},v1=`, /matches the body/],
      ["t=,v1=,=,,", /not a whole number/],
      ["✓=✓", /has no t=/],
    ]
    for (const [header, message] of cases) {
      expect(
        refusal(verifyWebhook(webhookRequest({ "stripe-signature": header }, body), "stripe", secret, clock)),
      ).toMatch(message)
    }
  })

  it("agree with Stripe's own verification on what it accepts", () => {
    const header = stripeHeader()
    expect(() =>
      Stripe.webhooks.signature?.verifyHeader(body, header, secret, 300, undefined, clock.now.getTime()),
    ).not.toThrow()
    expect(verifyWebhook(webhookRequest({ "stripe-signature": header }, body), "stripe", secret, clock).ok).toBe(true)
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({ "stripe-signature": "" }, body), "stripe", undefined, clock).ok).toBe(true)
  })
})
