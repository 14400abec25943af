import type { Server } from "node:http"
import type { AddressInfo } from "node:net"
import Koa from "koa"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { BrowserSession } from "../../test/browser-session.ts"
import { startStandin } from "../../test/oauth-standins.ts"
import type { AuditEntry, LoginAuditEntry } from "../audit.ts"
import { crossSiteGuard } from "../auth/cross-site.ts"
import { DeviceGrants } from "../auth/device-grants.ts"
import { loginProviders } from "../auth/login-providers.ts"
import { PendingLogins } from "../auth/pending-logins.ts"
import { sessionCookies } from "../auth/session-cookie.ts"
import { issueToken, verifyToken } from "../auth/session-token.ts"
import { providerUser } from "../auth/user.ts"
import { errorRenderer } from "../errors.ts"
import { loginRoutes, returnPath } from "./login.ts"

// The device authorization grant (RFC 8628) over real HTTP, on the login routes alone with a clock
// the test moves, so that expiry (10 minutes) and slow_down (the interval) are tested without waiting.

const secret = "device-grant-test-secret-of-32-characters"
let now = 1_000_000
let server: Server
let base: string
const audit: (AuditEntry | LoginAuditEntry)[] = []
const alice = providerUser({
  UserID: "7",
  Email: "alice@corp.example",
  Name: "Alice <Admin>",
  NickName: "alice",
  Provider: "github",
  Organizations: ["corp"],
  Groups: [],
})
let cookie: string

beforeAll(async () => {
  const app = new Koa()
  app.use(errorRenderer(() => {}))
  const login = {
    sessionSecret: secret,
    callbackUrl: "http://runnel.test",
    providers: loginProviders("http://runnel.test", []),
  }
  app.use(crossSiteGuard(login.callbackUrl))
  const routes = loginRoutes({
    login,
    audit: (entry) => audit.push(entry),
    maxBodyBytes: 1024,
    pendingLogins: new PendingLogins(() => now),
    deviceGrants: new DeviceGrants(() => now),
    // The limits per address (login-limits.test.ts) move with this clock too, so each test starts afresh.
    now: () => now,
  })
  app.use(routes.routes()).use(routes.allowedMethods())
  server = app.listen(0, "127.0.0.1")
  await new Promise((resolve) => server.once("listening", resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  cookie = `runnel_session=${sessionCookies(secret).seal(await issueToken(secret, alice))}`
})
afterAll(() => new Promise((resolve) => server.close(resolve)))
beforeEach(() => {
  now += 3_600_000
})

const post = async (path: string, form: Record<string, string>, headers: Record<string, string> = {}) => {
  const response = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(form).toString(),
    redirect: "manual",
  })
  const text = await response.text()
  return {
    status: response.status,
    text,
    body: response.headers.get("content-type")?.includes("json") ? JSON.parse(text) : undefined,
    headers: response.headers,
  }
}
const deviceCode = async () => (await post("/auth/device/code", { client_id: "runnel-cli" })).body
const poll = (code: string) =>
  post("/auth/device/token", { grant_type: "urn:ietf:params:oauth:grant-type:device_code", device_code: code })
const decide = (
  userCode: string,
  decision: string,
  headers: Record<string, string> = { Cookie: cookie, Origin: "http://runnel.test" },
) => post("/auth/device", { user_code: userCode, decision }, headers)

describe("the device authorization endpoint", () => {
  it("answers a device code, a user code of eight consonants, the verification URIs, 600 s and 5 s", async () => {
    const answer = await post("/auth/device/code", { client_id: "runnel-cli" })
    expect(answer.status).toBe(200)
    expect(answer.headers.get("cache-control")).toBe("no-store")
    expect(answer.body).toEqual({
      device_code: expect.stringMatching(/^[\w-]{43}$/),
      user_code: expect.stringMatching(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/),
      verification_uri: "http://runnel.test/auth/device",
      verification_uri_complete: `http://runnel.test/auth/device?user_code=${answer.body.user_code}`,
      expires_in: 600,
      interval: 5,
    })
  })

  it("refuses a body that is not a form with 415", async () => {
    const response = await fetch(`${base}/auth/device/code`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    })
    expect(response.status).toBe(415)
    expect(((await response.json()) as { error: string }).error).toMatch(/application\/x-www-form-urlencoded/)
  })
})

describe("the token endpoint", () => {
  it("answers authorization_pending, then slow_down (5 s more) when polled too soon, then pending again after the interval", async () => {
    const grant = await deviceCode()
    expect(await poll(grant.device_code)).toMatchObject({
      status: 400,
      body: { error: "authorization_pending", error_description: "the login has not been approved in the browser yet" },
    })
    now += 4_000
    expect((await poll(grant.device_code)).body).toEqual({
      error: "slow_down",
      error_description: "polled sooner than the interval; poll every 10 seconds from now on",
    })
    // Still sooner than 10 s after the last poll: 5 s more again.
    now += 6_000
    expect((await poll(grant.device_code)).body.error_description).toMatch(/every 15 seconds/)
    now += 15_000
    expect((await poll(grant.device_code)).body.error).toBe("authorization_pending")
  })

  it("gives the token once after the approval, then invalid_grant", async () => {
    const grant = await deviceCode()
    // Typed in lower case without the dash: RFC 8628 section 6.1 says to accept it.
    const typed = grant.user_code.replace("-", "").toLowerCase()
    const page = await fetch(`${base}/auth/device?user_code=${typed}`, { headers: { Cookie: cookie } })
    expect(page.status).toBe(200)
    const html = await page.text()
    expect(html).toContain(`<p class="code">${grant.user_code}</p>`)
    expect(html).toContain("<strong>Alice &#60;Admin&#62;</strong> (github:alice)")
    expect(page.headers.get("x-frame-options")).toBe("DENY")
    const approved = await decide(typed, "approve")
    expect(approved.status).toBe(200)
    expect(approved.text).toContain("Approved")
    expect(audit).toContainEqual(
      expect.objectContaining({
        event: "auth.device_approved",
        actor: "github:alice",
        provider: "github",
        via: "device",
      }),
    )
    const answer = await poll(grant.device_code)
    expect(answer.status).toBe(200)
    expect(answer.body).toEqual({ access_token: expect.any(String), token_type: "Bearer", expires_in: 2_592_000 })
    expect(await verifyToken(secret, answer.body.access_token)).toMatchObject({
      actor: "github:alice",
      Organizations: ["corp"],
    })
    now += 5_000
    expect(await poll(grant.device_code)).toMatchObject({
      status: 400,
      body: { error: "invalid_grant", error_description: expect.stringMatching(/already been exchanged/) },
    })
    // The code is used: the page does not offer it again.
    expect((await decide(grant.user_code, "approve")).status).toBe(400)
  })

  it("answers access_denied after a denial", async () => {
    const grant = await deviceCode()
    expect((await decide(grant.user_code, "deny")).text).toContain("Denied")
    expect((await poll(grant.device_code)).body.error).toBe("access_denied")
  })

  it("answers expired_token after ten minutes, approved or not", async () => {
    const grant = await deviceCode()
    now += 600_000
    expect((await poll(grant.device_code)).body).toEqual({
      error: "expired_token",
      error_description: "the device code has expired before it was approved; run runnel login again",
    })
    const page = await fetch(`${base}/auth/device?user_code=${grant.user_code}`, { headers: { Cookie: cookie } })
    expect(page.status).toBe(400)
    expect(await page.text()).toContain("That code is unknown, expired or already used")
  })

  it("refuses a body larger than the server's limit with 413", async () => {
    const answer = await post("/auth/device/token", { device_code: "x".repeat(2000) })
    expect(answer.status).toBe(413)
    expect(answer.body.error).toMatch(/larger than 1024 bytes/)
  })

  it("refuses a missing or unknown device code, and another grant type, as RFC 6749 says", async () => {
    expect(
      (await post("/auth/device/token", { grant_type: "urn:ietf:params:oauth:grant-type:device_code" })).body.error,
    ).toBe("invalid_request")
    expect((await poll("made-up")).body.error).toBe("invalid_grant")
    expect((await post("/auth/device/token", { device_code: "x" })).body.error).toBe("invalid_request")
    expect(await post("/auth/device/token", { grant_type: "password", device_code: "x" })).toMatchObject({
      status: 400,
      body: { error: "unsupported_grant_type" },
    })
  })
})

describe("the verification page", () => {
  it("sends a browser without a session to the login page, coming back here", async () => {
    const response = await fetch(`${base}/auth/device?user_code=BCDF-GHJK`, { redirect: "manual" })
    expect(response.status).toBe(302)
    expect(response.headers.get("location")).toBe(
      `/auth/login?next=${encodeURIComponent("/auth/device?user_code=BCDF-GHJK")}`,
    )
  })

  it("asks for the code when none is given", async () => {
    const response = await fetch(`${base}/auth/device`, { headers: { Cookie: cookie } })
    expect(await response.text()).toContain('<input name="user_code"')
  })

  it("refuses an approval without a session (401), from another site (403), or without a decision (400)", async () => {
    const grant = await deviceCode()
    expect((await decide(grant.user_code, "approve", {})).status).toBe(401)
    expect((await decide(grant.user_code, "approve", { Cookie: cookie, Origin: "https://evil.example" })).status).toBe(
      403,
    )
    expect((await decide(grant.user_code, "approve", { Cookie: cookie })).status).toBe(403)
    expect((await decide(grant.user_code, "maybe")).status).toBe(400)
    expect((await decide("ZZZZ-ZZZZ", "approve")).status).toBe(400)
    // None of these approved it.
    expect((await poll(grant.device_code)).body.error).toBe("authorization_pending")
  })
})

describe("a return path (?next=)", () => {
  it("is a path on this server or a 400", () => {
    expect(returnPath(undefined)).toBe("/auth/login")
    expect(returnPath("/api/me?x=1#y")).toBe("/api/me?x=1#y")
    for (const bad of [
      "//evil.example",
      "/\\evil.example",
      "/x\\y",
      "http://evil.example",
      "evil",
      "/\u0000",
      "/a\tb",
      ["/a", "/b"],
    ]) {
      expect(() => returnPath(bad), String(bad)).toThrow(expect.objectContaining({ status: 400 }))
    }
  })
})

describe("without OAuth", () => {
  it("every /auth path answers 404 saying how to configure a provider", async () => {
    const app = new Koa()
    app.use(errorRenderer(() => {}))
    const routes = loginRoutes({ login: undefined, audit: () => {}, maxBodyBytes: 1024 })
    app.use(routes.routes())
    const open = app.listen(0, "127.0.0.1")
    await new Promise((resolve) => open.once("listening", resolve))
    try {
      for (const path of ["/auth/login", "/auth/device/code", "/auth"]) {
        const response = await fetch(`http://127.0.0.1:${(open.address() as AddressInfo).port}${path}`, {
          method: "POST",
        })
        expect(response.status).toBe(404)
        expect(((await response.json()) as { error: string }).error).toMatch(
          /^this server has no OAuth login: start it with a provider's --oauth-<provider>-client-id/,
        )
      }
    } finally {
      await new Promise((resolve) => open.close(resolve))
    }
  })
})

describe("behind a proxy that ends TLS (an https callback URL, plain http here)", () => {
  it("marks the login and session cookies Secure", async () => {
    const github = await startStandin("github")
    const publicUrl = "https://runnel.example"
    const app = new Koa()
    app.use(errorRenderer(() => {}))
    const providers = loginProviders(publicUrl, [
      { name: "github", clientId: github.clientId, clientSecret: github.clientSecret, url: github.url },
    ])
    const routes = loginRoutes({
      login: { sessionSecret: secret, callbackUrl: publicUrl, providers },
      audit: () => {},
      maxBodyBytes: 1024,
    })
    app.use(routes.routes())
    const proxied = app.listen(0, "127.0.0.1")
    await new Promise((resolve) => proxied.once("listening", resolve))
    const local = `http://127.0.0.1:${(proxied.address() as AddressInfo).port}`
    try {
      const session = new BrowserSession()
      const toProvider = await session.request(`${local}/auth/github/login`)
      expect(session.setCookies.at(-1)).toMatch(/^runnel_login=.*; path=\/auth; .*; samesite=lax; secure; httponly$/)
      const back = new URL(
        (await fetch(toProvider.headers.get("location") as string, { redirect: "manual" })).headers.get(
          "location",
        ) as string,
      )
      expect(back.origin).toBe(publicUrl)
      const callback = await session.request(`${local}${back.pathname}${back.search}`)
      expect(callback.status).toBe(302)
      expect(session.setCookies.find((line) => line.startsWith("runnel_session="))).toMatch(
        /; samesite=lax; secure; httponly$/,
      )
    } finally {
      await new Promise((resolve) => proxied.close(resolve))
      await github.close()
    }
  })
})
