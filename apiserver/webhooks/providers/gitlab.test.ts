import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, hmacHex, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = JSON.stringify({ object_kind: "push", ref: "refs/heads/main" })

describe("gitlab webhooks", () => {
  it("are detected by X-Gitlab-Event, whose value is the event type", () => {
    expect(detectProvider(webhookRequest({ "x-gitlab-event": "Push Hook" }, body))).toEqual({
      provider: "gitlab",
      eventType: "Push Hook",
    })
  })

  it("accept the webhook secret itself in X-Gitlab-Token (GitLab's own scheme)", () => {
    const request = webhookRequest({ "x-gitlab-event": "Push Hook", "x-gitlab-token": secret }, body)
    expect(verifyWebhook(request, "gitlab", secret, clock)).toEqual({ ok: true })
  })

  it("accept sha256=<HMAC of the body> in X-Gitlab-Token", () => {
    const request = webhookRequest({ "x-gitlab-token": `sha256=${hmacHex(secret, body)}` }, body)
    expect(verifyWebhook(request, "gitlab", secret, clock)).toEqual({ ok: true })
  })

  it("accept a plain token that happens to start with sha256=", () => {
    const odd = `sha256=${"ab".repeat(32)}`
    expect(verifyWebhook(webhookRequest({ "x-gitlab-token": odd }, body), "gitlab", odd, clock)).toEqual({ ok: true })
  })

  it("refuse a request without X-Gitlab-Token when a secret is set", () => {
    const request = webhookRequest({ "x-gitlab-event": "Push Hook" }, body)
    expect(refusal(verifyWebhook(request, "gitlab", secret, clock))).toBe("the X-Gitlab-Token header is missing")
  })

  it("refuse a wrong token, a prefix of the secret, and an HMAC made with another secret", () => {
    for (const token of ["wrong", secret.slice(0, 5), `${secret}x`, `sha256=${hmacHex("other", body)}`, "sha256="]) {
      const message = refusal(verifyWebhook(webhookRequest({ "x-gitlab-token": token }, body), "gitlab", secret, clock))
      expect(message).toMatch(/^the X-Gitlab-Token header is neither the webhook secret nor sha256=/)
      expect(message).not.toContain(hmacHex(secret, body))
    }
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({ "x-gitlab-event": "Push Hook" }, body), "gitlab", undefined, clock).ok).toBe(
      true,
    )
  })
})
