import type { Server } from "node:http"
import type { AddressInfo } from "node:net"
import Koa from "koa"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { requestFrom } from "../../test/from-address.ts"
import { type Standin, startStandin } from "../../test/oauth-standins.ts"
import { crossSiteGuard } from "../auth/cross-site.ts"
import { DeviceGrants } from "../auth/device-grants.ts"
import { FailureCounter } from "../auth/failure-counter.ts"
import { loginProviders } from "../auth/login-providers.ts"
import { PendingLogins } from "../auth/pending-logins.ts"
import { sessionCookies } from "../auth/session-cookie.ts"
import { issueToken } from "../auth/session-token.ts"
import { providerUser } from "../auth/user.ts"
import { errorRenderer } from "../errors.ts"
import { loginRoutes } from "./login.ts"

// The limits of the login routes over real HTTP, each client at its own loopback address
// (127.0.0.x), on a clock the test moves: floods of logins and device codes, guessed user codes
// and failed callbacks are answered 429 with Retry-After, while a client at another address is not.

const secret = "login-limits-test-secret-of-32-characters"
const publicUrl = "http://runnel.test"
let now = 1_000_000
let server: Server
let base: string
let github: Standin
const person = (nick: string) =>
  providerUser({
    UserID: nick,
    Email: `${nick}@corp.example`,
    Name: nick,
    NickName: nick,
    Provider: "github",
    Organizations: [],
    Groups: [],
  })
const cookieOf = async (nick: string) =>
  `runnel_session=${sessionCookies(secret).seal(await issueToken(secret, person(nick)))}`

// Each test takes fresh addresses, so that no test sees another's counts.
let lastOctet = 1
const newAddress = () => `127.0.0.${++lastOctet}`

beforeAll(async () => {
  github = await startStandin("github")
  const app = new Koa()
  app.use(errorRenderer(() => {}))
  app.use(crossSiteGuard(publicUrl))
  const routes = loginRoutes({
    login: {
      sessionSecret: secret,
      callbackUrl: publicUrl,
      providers: loginProviders(publicUrl, [
        { name: "github", clientId: github.clientId, clientSecret: github.clientSecret, url: github.url },
      ]),
    },
    audit: () => {},
    maxBodyBytes: 1024,
    failures: new FailureCounter(),
    // Room for 15 logins in all: two addresses can fill it, and a third must not push theirs out.
    pendingLogins: new PendingLogins(() => now, 15),
    // Room for 15 device codes in all: three addresses can fill it.
    deviceGrants: new DeviceGrants(() => now, 15),
    now: () => now,
  })
  app.use(routes.routes()).use(routes.allowedMethods())
  server = app.listen(0, "127.0.0.1")
  await new Promise((resolve) => server.once("listening", resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve))
  await github.close()
})
beforeEach(() => {
  // Past every window and expiry of the test before.
  now += 3_600_000
  github.deny = false
})

const deviceCode = (address: string) =>
  requestFrom(address, `${base}/auth/device/code`, { method: "POST", form: { client_id: "runnel-cli" } })
const startLogin = (address: string) => requestFrom(address, `${base}/auth/github/login`)
/** Starts a login from `address` and lets the stand-in answer; the callback's path and the browser's state cookie. */
async function throughProvider(address: string) {
  const started = await startLogin(address)
  expect(started.status).toBe(302)
  const state = /^runnel_login=([^;]+)/.exec(started.headers["set-cookie"]?.[0] ?? "")?.[1] as string
  const back = await fetch(started.headers.location as string, { redirect: "manual" })
  const callback = new URL(back.headers.get("location") as string)
  return { path: `${callback.pathname}${callback.search}`, cookie: `runnel_login=${state}` }
}
const callback = (address: string, path: string, cookie?: string) =>
  requestFrom(address, `${base}${path}`, cookie === undefined ? {} : { headers: { Cookie: cookie } })
const json = (text: string) => JSON.parse(text) as Record<string, string>

describe("device codes", () => {
  it("gives one address 5 pending codes, then 429 slow_down with Retry-After until its oldest expires; another address is unaffected", async () => {
    const flooder = newAddress()
    for (let i = 0; i < 5; i++) expect((await deviceCode(flooder)).status).toBe(200)
    const refused = await deviceCode(flooder)
    expect(refused.status).toBe(429)
    expect(refused.headers["retry-after"]).toBe("600")
    expect(json(refused.text)).toEqual({
      error: "slow_down",
      error_description:
        "too many logins started from this address (10 a minute, or too many under way); try again in 600 s",
    })
    const other = await deviceCode(newAddress())
    expect(other.status).toBe(200)
    expect(json(other.text).user_code).toMatch(/^[A-Z]{4}-[A-Z]{4}$/)
    // Once its codes expire, the address may ask again.
    now += 600_000
    expect((await deviceCode(flooder)).status).toBe(200)
  })

  it("refuses a new code with 503 temporarily_unavailable when the server is full, never pushing out another address's code", async () => {
    const [a, b, c] = [newAddress(), newAddress(), newAddress()]
    const first = json((await deviceCode(a)).text)
    for (const address of [a, a, a, a, b, b, b, b, b, c, c, c, c, c]) {
      expect((await deviceCode(address)).status).toBe(200)
    }
    const refused = await deviceCode(newAddress())
    expect(refused.status).toBe(503)
    expect(json(refused.text)).toEqual({
      error: "temporarily_unavailable",
      error_description: "too many logins are pending on this server; try again in a minute",
    })
    const polled = await requestFrom("127.0.0.1", `${base}/auth/device/token`, {
      method: "POST",
      form: { grant_type: "urn:ietf:params:oauth:grant-type:device_code", device_code: first.device_code as string },
    })
    expect(json(polled.text).error).toBe("authorization_pending")
  })

  it("ignores X-Forwarded-For: the address is the TCP peer's", async () => {
    const flooder = newAddress()
    for (let i = 0; i < 5; i++) await deviceCode(flooder)
    const spoofed = await requestFrom(flooder, `${base}/auth/device/code`, {
      method: "POST",
      form: { client_id: "runnel-cli" },
      headers: { "X-Forwarded-For": "203.0.113.9" },
    })
    expect(spoofed.status).toBe(429)
  })
})

describe("browser logins", () => {
  it("lets one address start 10 logins and device codes a minute, then 429 with Retry-After; another address is unaffected", async () => {
    const flooder = newAddress()
    for (let i = 0; i < 5; i++) expect((await deviceCode(flooder)).status).toBe(200)
    for (let i = 0; i < 5; i++) expect((await startLogin(flooder)).status).toBe(302)
    const refused = await startLogin(flooder)
    expect(refused.status).toBe(429)
    expect(refused.headers["retry-after"]).toBe("60")
    expect(json(refused.text).error).toMatch(/^too many logins started from this address .* try again in 60 s$/)
    expect((await startLogin(newAddress())).status).toBe(302)
    // A minute on, the rate allows more: 5 more logins, then it has 10 under way until the first expires.
    now += 60_000
    for (let i = 0; i < 5; i++) expect((await startLogin(flooder)).status).toBe(302)
    const stillFull = await startLogin(flooder)
    expect(stillFull.status).toBe(429)
    expect(stillFull.headers["retry-after"]).toBe("540")
  })

  it("refuses a new login with 503 when the server is full, never pushing out another address's login", async () => {
    const first = newAddress()
    const own = await throughProvider(first)
    for (let i = 0; i < 9; i++) await startLogin(first)
    const second = newAddress()
    for (let i = 0; i < 5; i++) expect((await startLogin(second)).status).toBe(302)
    const third = await startLogin(newAddress())
    expect(third.status).toBe(503)
    expect(json(third.text).error).toMatch(/too many logins are under way on this server/)
    // The first address's first login still completes.
    const done = await callback(first, own.path, own.cookie)
    expect(done.status).toBe(302)
    expect(done.headers["set-cookie"]?.some((line) => line.startsWith("runnel_session="))).toBe(true)
  })
})

describe("failed callbacks", () => {
  it("count against the address: a refused login and 9 bad or replayed states, then 429 even for a good callback", async () => {
    const address = newAddress()
    github.deny = true
    const denied = await throughProvider(address)
    expect((await callback(address, denied.path, denied.cookie)).status).toBe(403)
    github.deny = false
    const good = await throughProvider(address)
    for (let i = 0; i < 8; i++) {
      const bad = await callback(address, `/auth/github/callback?code=x&state=made-up-${i}`)
      expect(bad.status).toBe(400)
      expect(json(bad.text).error).toMatch(/state is unknown, expired or already used/)
    }
    // A replay of the refused login's callback: its state was used.
    expect((await callback(address, denied.path, denied.cookie)).status).toBe(400)
    const refused = await callback(address, good.path, good.cookie)
    expect(refused.status).toBe(429)
    expect(refused.headers["retry-after"]).toBe("60")
    expect(json(refused.text)).toEqual({
      error: "too many failed authentication attempts from this address; try again in 60 s",
    })
    // Someone at another address logs in as usual.
    const other = newAddress()
    const theirs = await throughProvider(other)
    expect((await callback(other, theirs.path, theirs.cookie)).status).toBe(302)
  })
})

describe("the verification page", () => {
  const approve = (address: string, cookie: string, userCode: string, extra: Record<string, string> = {}) =>
    requestFrom(address, `${base}/auth/device`, {
      method: "POST",
      form: { user_code: userCode, decision: "approve" },
      headers: { Cookie: cookie, Origin: publicUrl, ...extra },
    })
  const look = (address: string, cookie: string, userCode: string) =>
    requestFrom(address, `${base}/auth/device?user_code=${userCode}`, { headers: { Cookie: cookie } })

  it("says a wrong code is wrong, and after 10 in a minute answers 429 to the person at any address, even for a right code", async () => {
    const alice = await cookieOf("alice")
    const address = newAddress()
    const real = json((await deviceCode(newAddress())).text)
    for (let i = 0; i < 10; i++) {
      const guess = `BCDF-GH${"JKLMNPQRST"[i]}Z`
      const wrong = i % 2 === 0 ? await look(address, alice, guess) : await approve(address, alice, guess)
      expect(wrong.status).toBe(400)
      expect(wrong.text).toContain("That code is unknown, expired or already used.")
    }
    const refused = await look(address, alice, real.user_code as string)
    expect(refused.status).toBe(429)
    expect(refused.headers["retry-after"]).toBe("60")
    expect(refused.headers["content-type"]).toMatch(/^text\/html/)
    expect(refused.text).toContain("Too many wrong codes or failed logins (10 a minute). Try again in 60 s.")
    // The same person from another address is refused too (the count is per person as well).
    expect((await approve(newAddress(), alice, real.user_code as string)).status).toBe(429)
    // Bob, elsewhere, approves his own code.
    const bobs = json((await deviceCode(newAddress())).text)
    const bob = await approve(newAddress(), await cookieOf("bob"), bobs.user_code as string)
    expect(bob.status).toBe(200)
    expect(bob.text).toContain("Approved")
    // A minute on, alice may approve the real code.
    now += 60_000
    expect((await approve(newAddress(), alice, real.user_code as string)).status).toBe(200)
  })

  it("answers an approval without a valid session 401 with the API's challenge", async () => {
    const address = newAddress()
    const none = await requestFrom(address, `${base}/auth/device`, {
      method: "POST",
      form: { user_code: "BCDF-GHJK", decision: "approve" },
    })
    expect(none.status).toBe(401)
    expect(none.headers["www-authenticate"]).toBe('Bearer realm="runnel"')
    expect(json(none.text).error).toBe("log in at /auth/login before approving a device code")
    const forged = await approve(address, "runnel_session=forged", "BCDF-GHJK")
    expect(forged.status).toBe(401)
    expect(forged.headers["www-authenticate"]).toBe(
      'Bearer realm="runnel", error="invalid_token", error_description="log in at /auth/login before approving a device code"',
    )
  })
})
