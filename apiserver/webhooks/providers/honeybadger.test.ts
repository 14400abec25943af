import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook } from "../providers.ts"
import { clock, refusal, secret, webhookRequest } from "../test-request.fixture.ts"

describe("honeybadger webhooks", () => {
  it("are detected by Honeybadger-Token; the event type is the body's type, else its event", () => {
    const typed = webhookRequest({ "honeybadger-token": secret }, JSON.stringify({ type: "check_in_missing" }))
    expect(detectProvider(typed)).toEqual({ provider: "honeybadger", eventType: "check_in_missing" })
    const evented = webhookRequest({ "honeybadger-token": secret }, JSON.stringify({ event: "occurred" }))
    expect(detectProvider(evented)).toEqual({ provider: "honeybadger", eventType: "occurred" })
  })

  it("accept a Honeybadger-Token equal to the webhook secret", () => {
    expect(verifyWebhook(webhookRequest({ "honeybadger-token": secret }), "honeybadger", secret, clock)).toEqual({
      ok: true,
    })
  })

  it("refuse a missing or different token", () => {
    expect(refusal(verifyWebhook(webhookRequest({}), "honeybadger", secret, clock))).toBe(
      "the Honeybadger-Token header is missing",
    )
    for (const token of ["wrong", secret.slice(0, -1), `${secret} and more`]) {
      expect(refusal(verifyWebhook(webhookRequest({ "honeybadger-token": token }), "honeybadger", secret, clock))).toBe(
        "the Honeybadger-Token header does not match this pipeline's webhook secret",
      )
    }
  })

  it("refuse every request while the pipeline has no webhook secret", () => {
    for (const missing of [undefined, ""]) {
      expect(
        refusal(verifyWebhook(webhookRequest({ "honeybadger-token": "anything" }), "honeybadger", missing, clock)),
      ).toMatch(/refused until the pipeline has a webhook secret/)
    }
  })
})
