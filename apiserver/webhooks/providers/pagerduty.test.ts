import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const v2 = JSON.stringify({ messages: [{ event: "incident.trigger" }, { event: "incident.resolve" }] })
const v3 = JSON.stringify({ event: { id: "01", event_type: "incident.triggered", resource_type: "incident" } })

function request(body: string, signature?: string) {
  return webhookRequest({ "x-pagerduty-signature": signature ?? `v1=${hmacHex(secret, body)}` }, body)
}

describe("pagerduty webhooks", () => {
  it("are detected by X-PagerDuty-Signature; the event type is the first message's event", () => {
    expect(detectProvider(request(v2))).toEqual({ provider: "pagerduty", eventType: "incident.trigger" })
  })

  it("fall back to the top-level event, then to type", () => {
    expect(detectProvider(request(JSON.stringify({ event: "ping", type: "x" }))).eventType).toBe("ping")
    expect(detectProvider(request(JSON.stringify({ messages: [], type: "webhook" }))).eventType).toBe("webhook")
    expect(detectProvider(request("not json")).eventType).toBe("")
  })

  it("read a V3 event object's event_type", () => {
    expect(detectProvider(request(v3)).eventType).toBe("incident.triggered")
  })

  it("accept v1=<HMAC of the body>", () => {
    expect(verifyWebhook(request(v2), "pagerduty", secret, clock)).toEqual({ ok: true })
  })

  it("accept when any one of several v1 values matches", () => {
    const header = `v1=${hmacHex("old", v2)}, v1=${hmacHex(secret, v2)},v1=zz`
    expect(verifyWebhook(request(v2, header), "pagerduty", secret, clock)).toEqual({ ok: true })
  })

  it("refuse a missing signature, no v1 value, and no matching v1 value", () => {
    expect(refusal(verifyWebhook(webhookRequest({}, v2), "pagerduty", secret, clock))).toBe(
      "the X-PagerDuty-Signature header is missing",
    )
    expect(refusal(verifyWebhook(request(v2, `v2=${hmacHex(secret, v2)}`), "pagerduty", secret, clock))).toBe(
      "the X-PagerDuty-Signature header has no v1=<signature>",
    )
    const wrong = `v1=${hmacHex("old", v2)},v1=${hmacHex("older", v2)}`
    expect(refusal(verifyWebhook(request(v2, wrong), "pagerduty", secret, clock), hmacHex(secret, v2))).toMatch(
      /^no v1= signature in the X-PagerDuty-Signature header matches the body/,
    )
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(request(v2, ""), "pagerduty", undefined, clock).ok).toBe(true)
  })
})
