import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { detectProvider, verifyWebhook, verifyWithWatchedSecret, webhookProviders } from "./providers.ts"
import { clock, hmacHex, refusal, secret, webhookRequest } from "./test-request.fixture.ts"
import type { IncomingWebhook } from "./webhook-provider.ts"

const names = webhookProviders.map((provider) => provider.name)

describe("webhook provider detection", () => {
  it("tries the providers in the specification's order, generic last", () => {
    expect(names).toEqual([
      "github",
      "gitlab",
      "bitbucket",
      "slack",
      "honeybadger",
      "stripe",
      "pagerduty",
      "linear",
      "sentry",
      "generic",
    ])
  })

  it("lets the earlier provider win when a request carries two providers' headers", () => {
    const all = {
      "x-github-event": "push",
      "x-gitlab-event": "Push Hook",
      "x-event-key": "repo:push",
      "x-slack-signature": "v0=00",
      "honeybadger-token": "t",
      "stripe-signature": "t=1",
      "x-pagerduty-signature": "v1=00",
      "linear-signature": "00",
      "sentry-hook-signature": "00",
    }
    const remaining: Record<string, string> = { ...all }
    for (const name of names.slice(0, -1)) {
      expect(detectProvider(webhookRequest(remaining)).provider).toBe(name)
      delete remaining[Object.keys(remaining)[0] ?? ""]
    }
    expect(detectProvider(webhookRequest(remaining)).provider).toBe("generic")
  })

  it("detects by presence, even of an empty or repeated header", () => {
    expect(detectProvider(webhookRequest({ "x-github-event": "" }))).toEqual({ provider: "github", eventType: "" })
    expect(detectProvider(webhookRequest({ "x-github-event": ["push", "issues"] }))).toEqual({
      provider: "github",
      eventType: "push",
    })
    expect(detectProvider(webhookRequest({ "x-github-event": [] })).provider).toBe("generic")
    expect(detectProvider(webhookRequest({ "x-github-event": undefined })).provider).toBe("generic")
  })

  it("gives an empty event type for bodies that are not a JSON object", () => {
    for (const body of ["", "not json", "[1,2]", "null", '"type"', "{", '{"type": {"nested": 1}}', "\uFEFF"]) {
      for (const header of ["x-slack-signature", "honeybadger-token", "stripe-signature", "linear-signature"]) {
        expect(detectProvider(webhookRequest({ [header]: "x" }, body))).toEqual({
          provider: header === "x-slack-signature" ? "slack" : header.split("-")[0],
          eventType: "",
        })
      }
    }
  })

  it("reads a JSON body that starts with a byte-order mark", () => {
    expect(detectProvider(webhookRequest({ "stripe-signature": "" }, '\uFEFF{"type":"charge.failed"}')).eventType).toBe(
      "charge.failed",
    )
  })

  it("does not read fields from the prototype", () => {
    const request = webhookRequest({ "linear-signature": "" }, '{"__proto__":{"type":"polluted"}}')
    expect(detectProvider(request).eventType).toBe("")
    expect(detectProvider(webhookRequest({ constructor: "x", __proto__: "y" } as never)).provider).toBe("generic")
  })
})

describe("webhook verification", () => {
  it("refuses an unknown provider name, listing the known ones", () => {
    expect(refusal(verifyWebhook(webhookRequest({}), "gitea", secret, clock))).toMatch(
      /^unknown webhook provider "gitea"; known: github, gitlab/,
    )
  })

  it("treats an empty secret as no secret", () => {
    expect(verifyWebhook(webhookRequest({ "x-github-event": "push" }), "github", "", clock)).toEqual({ ok: true })
  })

  it("accepts unsigned requests without a secret for every provider but honeybadger", () => {
    for (const name of names) {
      expect(verifyWebhook(webhookRequest({}), name, undefined, clock).ok).toBe(name !== "honeybadger")
    }
  })

  it("refuses unsigned requests with a secret for every provider", () => {
    for (const name of names) {
      expect(refusal(verifyWebhook(webhookRequest({}), name, secret, clock))).toMatch(/missing/)
    }
  })

  it("defaults to the current time and a five-minute allowed age", () => {
    const t = Math.floor(Date.now() / 1000)
    const body = '{"type":"url_verification"}'
    const headers = {
      "x-slack-signature": `v0=${hmacHex(secret, `v0:${t}:${body}`)}`,
      "x-slack-request-timestamp": `${t}`,
    }
    expect(verifyWebhook(webhookRequest(headers, body), "slack", secret)).toEqual({ ok: true })
  })
})

describe("verification with a watched secret", () => {
  const body = '{"ref":"main"}'
  const signedWith = (key: string) =>
    webhookRequest({ "x-github-event": "push", "x-hub-signature-256": `sha256=${hmacHex(key, body)}` }, body)
  const reader = (value: string | undefined) => {
    const reads: number[] = []
    const read = async () => {
      reads.push(1)
      return value
    }
    return { reads, read }
  }

  it("takes a delivery signed with the watched secret without reading it", async () => {
    const { reads, read } = reader(secret)
    expect(await verifyWithWatchedSecret(signedWith(secret), "github", secret, read, clock)).toEqual({ ok: true })
    expect(reads).toHaveLength(0)
  })

  it("reads the secret when the watch holds none or holds one a change has not reached yet", async () => {
    const none = reader(secret)
    expect(await verifyWithWatchedSecret(signedWith(secret), "github", undefined, none.read, clock)).toEqual({
      ok: true,
    })
    expect(none.reads).toHaveLength(1)
    const stale = reader("rotated")
    expect(await verifyWithWatchedSecret(signedWith("rotated"), "github", secret, stale.read, clock)).toEqual({
      ok: true,
    })
    expect(stale.reads).toHaveLength(1)
  })

  it("refuses what neither verifies, with the message of the secret read, and passes a failed read on", async () => {
    const { read } = reader("rotated")
    expect(
      refusal(await verifyWithWatchedSecret(signedWith(`${secret}x`), "github", secret, read, clock), secret),
    ).toMatch(/does not match the body/)
    const gone = async () => {
      throw new Error("the Secret is gone")
    }
    await expect(verifyWithWatchedSecret(signedWith("x"), "github", secret, gone, clock)).rejects.toThrow(/gone/)
  })
})

const headerNames = [
  "x-github-event",
  "x-hub-signature-256",
  "x-gitlab-event",
  "x-gitlab-token",
  "x-event-key",
  "x-hub-signature",
  "x-slack-signature",
  "x-slack-request-timestamp",
  "honeybadger-token",
  "stripe-signature",
  "x-pagerduty-signature",
  "linear-signature",
  "sentry-hook-signature",
  "sentry-hook-resource",
  "x-webhook-signature",
  "__proto__",
  "constructor",
]

const text = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.constantFrom("", "sha256=", "v0=", "v1=zz", "t=abc", "t=1,v1=", "t=,v1=,,=", "sha256=é", "v1=\u0000"),
  fc.stringMatching(/^(sha256=|v0=|v1=)?[0-9a-f]{64}$/),
  fc.tuple(fc.nat(), fc.stringMatching(/^[0-9a-f]{64}$/)).map(([t, hex]) => `t=${t},v1=${hex},v1=${hex}`),
)
const value = fc.oneof(text, fc.array(text, { maxLength: 3 }), fc.constant(undefined))
const headers = fc.dictionary(fc.oneof(fc.constantFrom(...headerNames), fc.string()), value, { maxKeys: 8 })
const query = fc.dictionary(fc.oneof(fc.constant("signature"), fc.string()), value, { maxKeys: 3 })
const body = fc.oneof(
  fc.uint8Array({ maxLength: 512 }).map((bytes) => Buffer.from(bytes)),
  fc.json().map((json) => Buffer.from(json)),
  fc.string({ unit: "grapheme" }).map((s) => Buffer.from(s)),
  fc
    .record({ type: fc.jsonValue(), action: fc.jsonValue(), event: fc.jsonValue(), messages: fc.jsonValue() })
    .map((object) => Buffer.from(JSON.stringify(object))),
)
const requests: fc.Arbitrary<IncomingWebhook> = fc
  .record({ headers, query, body })
  .map((r) => ({ method: "POST", headers: r.headers, query: r.query, rawBody: r.body }))

function wellFormed(result: unknown): boolean {
  if (typeof result !== "object" || result === null) return false
  const keys = Object.keys(result).sort().join(",")
  if (keys === "ok") return (result as { ok: unknown }).ok === true
  const { ok, message } = result as { ok: unknown; message: unknown }
  return keys === "message,ok" && ok === false && typeof message === "string" && message.length > 0
}

describe("webhook providers on arbitrary input", () => {
  it("detect without throwing, naming a known provider and a string event type", () => {
    fc.assert(
      fc.property(requests, (request) => {
        const detected = detectProvider(request)
        expect(names).toContain(detected.provider)
        expect(typeof detected.eventType).toBe("string")
      }),
      { numRuns: 1000 },
    )
  })

  it("verify without throwing, quickly, never echoing the secret or the expected signature", () => {
    const started = performance.now()
    fc.assert(
      fc.property(
        requests,
        fc.oneof(fc.constant(undefined), fc.constant(""), fc.string({ minLength: 12, unit: "grapheme" })),
        fc.integer({ min: 0, max: 2_000_000_000 }).map((seconds) => new Date(seconds * 1000)),
        (request, key, now) => {
          for (const name of names) {
            const result = verifyWebhook(request, name, key, { now, maxAgeMs: 300_000 })
            expect(wellFormed(result)).toBe(true)
            if (!result.ok && key !== undefined && key !== "") {
              expect(result.message).not.toContain(key)
              expect(result.message).not.toContain(hmacHex(key, request.rawBody))
            }
          }
        },
      ),
      { numRuns: 500 },
    )
    // 5,000 verifications: a pathological regular expression or parse would blow well past this.
    expect(performance.now() - started).toBeLessThan(10_000)
  })

  it("accept any body signed with any secret by the documented HMAC", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 256 }), fc.string({ minLength: 1, unit: "grapheme" }), (bytes, key) => {
        const raw = Buffer.from(bytes)
        const hex = hmacHex(key, raw)
        const signed: [string, IncomingWebhook][] = [
          ["github", { ...webhookRequest({ "x-hub-signature-256": `sha256=${hex}` }), rawBody: raw }],
          ["gitlab", { ...webhookRequest({ "x-gitlab-token": `sha256=${hex}` }), rawBody: raw }],
          ["bitbucket", { ...webhookRequest({ "x-hub-signature": `sha256=${hex}` }), rawBody: raw }],
          ["pagerduty", { ...webhookRequest({ "x-pagerduty-signature": `v1=${hex}` }), rawBody: raw }],
          ["linear", { ...webhookRequest({ "linear-signature": hex }), rawBody: raw }],
          ["sentry", { ...webhookRequest({ "sentry-hook-signature": hex }), rawBody: raw }],
          ["generic", { ...webhookRequest({}, "", { signature: hex }), rawBody: raw }],
        ]
        for (const [name, request] of signed) expect(verifyWebhook(request, name, key, clock)).toEqual({ ok: true })
      }),
      { numRuns: 200 },
    )
  })
})
