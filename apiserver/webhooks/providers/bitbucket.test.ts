import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = JSON.stringify({ push: { changes: [] }, repository: { full_name: "team/repo" } })

describe("bitbucket webhooks", () => {
  it("are detected by X-Event-Key, whose value is the event type", () => {
    expect(detectProvider(webhookRequest({ "x-event-key": "repo:push" }, body))).toEqual({
      provider: "bitbucket",
      eventType: "repo:push",
    })
  })

  it("accept X-Hub-Signature: sha256=<HMAC of the body>", () => {
    const request = webhookRequest(
      { "x-event-key": "repo:push", "x-hub-signature": `sha256=${hmacHex(secret, body)}` },
      body,
    )
    expect(verifyWebhook(request, "bitbucket", secret, clock)).toEqual({ ok: true })
  })

  it("refuse a request without X-Hub-Signature when a secret is set", () => {
    const request = webhookRequest({ "x-event-key": "repo:push" }, body)
    expect(refusal(verifyWebhook(request, "bitbucket", secret, clock))).toBe("the X-Hub-Signature header is missing")
  })

  it("refuse a wrong signature and one without its sha256= prefix", () => {
    const wrong = webhookRequest({ "x-hub-signature": `sha256=${hmacHex("other", body)}` }, body)
    expect(refusal(verifyWebhook(wrong, "bitbucket", secret, clock), hmacHex(secret, body))).toMatch(
      /^the X-Hub-Signature signature does not match the body/,
    )
    const bare = webhookRequest({ "x-hub-signature": hmacHex(secret, body) }, body)
    expect(refusal(verifyWebhook(bare, "bitbucket", secret, clock))).toMatch(/is not sha256=<64 hex digits>/)
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({ "x-event-key": "repo:push" }, body), "bitbucket", undefined, clock).ok).toBe(
      true,
    )
  })
})
