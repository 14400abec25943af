import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, nowSeconds, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = JSON.stringify({ type: "event_callback", event: { type: "app_mention", text: "deploy ✓" } })

/** Slack's documented scheme: v0=HMAC-SHA256(secret, "v0:<timestamp>:<body>"). */
function signed(timestamp: number | string, payload = body, key = secret) {
  return webhookRequest(
    {
      "x-slack-signature": `v0=${hmacHex(key, `v0:${timestamp}:${payload}`)}`,
      "x-slack-request-timestamp": String(timestamp),
    },
    payload,
  )
}

describe("slack webhooks", () => {
  it("are detected by X-Slack-Signature; the event type is the body's type", () => {
    expect(detectProvider(signed(nowSeconds))).toEqual({ provider: "slack", eventType: "event_callback" })
  })

  it("have an empty event type when the body is not JSON (a form post)", () => {
    expect(detectProvider(signed(nowSeconds, "command=%2Fdeploy&text=prod"))).toEqual({
      provider: "slack",
      eventType: "",
    })
  })

  it("accept a signature over v0:<timestamp>:<body>", () => {
    expect(verifyWebhook(signed(nowSeconds - 30), "slack", secret, clock)).toEqual({ ok: true })
  })

  it("refuse a request without the timestamp header when a secret is set", () => {
    const request = signed(nowSeconds)
    const { "x-slack-request-timestamp": _, ...headers } = request.headers
    expect(refusal(verifyWebhook({ ...request, headers }, "slack", secret, clock))).toBe(
      "the X-Slack-Request-Timestamp header is missing",
    )
  })

  it("refuse a request without the signature header when a secret is set", () => {
    const request = webhookRequest({ "x-slack-request-timestamp": String(nowSeconds) }, body)
    expect(refusal(verifyWebhook(request, "slack", secret, clock))).toBe("the X-Slack-Signature header is missing")
  })

  it("refuse a wrong signature, and a genuine one moved to another timestamp", () => {
    const wrong = signed(nowSeconds, body, "other")
    expect(refusal(verifyWebhook(wrong, "slack", secret, clock))).toMatch(
      /^the X-Slack-Signature signature does not match/,
    )
    const moved = { ...signed(nowSeconds - 10), headers: { ...signed(nowSeconds - 10).headers } }
    moved.headers["x-slack-request-timestamp"] = String(nowSeconds)
    expect(verifyWebhook(moved, "slack", secret, clock).ok).toBe(false)
  })

  it("refuse a genuine request older than the allowed age as a replay", () => {
    expect(refusal(verifyWebhook(signed(nowSeconds - 7 * 60), "slack", secret, clock))).toBe(
      "the X-Slack-Request-Timestamp is 7m0s old; older than 5m0s is refused as a replay",
    )
  })

  it("refuse a timestamp too far in the future", () => {
    expect(refusal(verifyWebhook(signed(nowSeconds + 3600), "slack", secret, clock))).toMatch(
      /^the X-Slack-Request-Timestamp is 1h0m0s in the future; more than 5m0s ahead is refused/,
    )
  })

  it("refuse timestamps that are not whole seconds", () => {
    for (const timestamp of ["abc", "1e9", "-5", "12.5", "١٢٣"]) {
      expect(refusal(verifyWebhook(signed(timestamp), "slack", secret, clock))).toBe(
        "the X-Slack-Request-Timestamp header is not a whole number of seconds",
      )
    }
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({ "x-slack-signature": "" }, body), "slack", undefined, clock).ok).toBe(true)
  })
})
