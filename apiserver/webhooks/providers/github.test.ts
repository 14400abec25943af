import { sign } from "@octokit/webhooks-methods"
import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

const body = JSON.stringify({ ref: "refs/heads/main", repository: { full_name: "octo/runnel" }, note: "héllo ✓" })

describe("github webhooks", () => {
  it("are detected by X-GitHub-Event, whose value is the event type", () => {
    expect(detectProvider(webhookRequest({ "x-github-event": "push" }, body))).toEqual({
      provider: "github",
      eventType: "push",
    })
  })

  it("accept the X-Hub-Signature-256 that GitHub's own library makes", async () => {
    const signature = await sign(secret, body)
    const request = webhookRequest({ "x-github-event": "push", "x-hub-signature-256": signature }, body)
    expect(verifyWebhook(request, "github", secret, clock)).toEqual({ ok: true })
  })

  it("accept an upper-case hex signature", async () => {
    const signature = `sha256=${(await sign(secret, body)).slice(7).toUpperCase()}`
    const request = webhookRequest({ "x-github-event": "push", "x-hub-signature-256": signature }, body)
    expect(verifyWebhook(request, "github", secret, clock)).toEqual({ ok: true })
  })

  it("refuse a request without X-Hub-Signature-256 when a secret is set", () => {
    const request = webhookRequest({ "x-github-event": "push" }, body)
    expect(refusal(verifyWebhook(request, "github", secret, clock))).toBe("the X-Hub-Signature-256 header is missing")
  })

  it("refuse a signature made with another secret, without showing the expected one", async () => {
    const expected = await sign(secret, body)
    const request = webhookRequest({ "x-github-event": "push", "x-hub-signature-256": await sign("other", body) }, body)
    expect(refusal(verifyWebhook(request, "github", secret, clock), expected.slice(7))).toMatch(
      /^the X-Hub-Signature-256 signature does not match the body/,
    )
  })

  it("refuse a signature of another body", async () => {
    const request = webhookRequest({ "x-hub-signature-256": await sign(secret, `${body} `) }, body)
    expect(refusal(verifyWebhook(request, "github", secret, clock))).toMatch(/does not match the body/)
  })

  it("refuse malformed and repeated signature headers cleanly", async () => {
    const good = await sign(secret, body)
    for (const value of ["sha256=", "sha256", good.slice(7), `sha1=${good.slice(7)}`, `${good}00`, "sha256=zz", ""]) {
      expect(verifyWebhook(webhookRequest({ "x-hub-signature-256": value }, body), "github", secret, clock).ok).toBe(
        false,
      )
    }
    const repeated = webhookRequest({ "x-hub-signature-256": [good, good] }, body)
    expect(refusal(verifyWebhook(repeated, "github", secret, clock))).toBe(
      "the X-Hub-Signature-256 header was sent 2 times; send it once",
    )
  })

  it("accept an unsigned request when no secret is set", () => {
    expect(verifyWebhook(webhookRequest({ "x-github-event": "push" }, body), "github", undefined, clock)).toEqual({
      ok: true,
    })
  })
})
