import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { sessionCookies } from "../apiserver/auth/session-cookie.ts"
import { BrowserSession } from "./browser-session.ts"
import { requestFrom } from "./from-address.ts"
import { type Standin, startOAuthServer, startStandin } from "./oauth-standins.ts"
import { type ServerProcess, serverProcesses } from "./server-process.ts"

// One count of failures per address for the whole server, over real HTTP against a runnel server
// process in OAuth mode: failed login callbacks slow the API for that address, wrong tokens at the
// API slow its logins, and a person at another address (127.0.0.1, the default) is unaffected.
// The clients are distinct loopback addresses (127.0.0.x).

const sessionSecret = "a-session-secret-of-more-than-32-characters"
const servers = serverProcesses("runnel-login-limits-")
let server: ServerProcess
let github: Standin
let token: string

beforeAll(async () => {
  github = await startStandin("github")
  server = await startOAuthServer(servers, { github }, sessionSecret)
  // The legitimate person logs in from 127.0.0.1 before anyone fails.
  const session = new BrowserSession()
  const { response } = await session.follow(`${server.url}/auth/github/login?next=/api/me`)
  expect(response.status).toBe(200)
  token = sessionCookies(sessionSecret).open(session.cookies.get("runnel_session") as string) as string
}, 60_000)

afterAll(async () => {
  servers.cleanUp()
  await github?.close()
})

const me = (address: string, authorization: string) =>
  requestFrom(address, `${server.url}/api/me`, { headers: { Authorization: authorization } })

describe("the failure count shared by the login and the API", () => {
  it("answers the API 429 to an address after 10 failed callbacks, while the person elsewhere works on", async () => {
    const guesser = "127.0.0.2"
    for (let i = 0; i < 10; i++) {
      const bad = await requestFrom(guesser, `${server.url}/auth/github/callback?code=x&state=guess-${i}`)
      expect(bad.status).toBe(400)
    }
    const refused = await me(guesser, `Bearer ${token}`)
    expect(refused.status).toBe(429)
    expect(Number(refused.headers["retry-after"])).toBeGreaterThan(0)
    expect(JSON.parse(refused.text).error).toMatch(/^too many failed authentication attempts from this address/)
    const fine = await me("127.0.0.1", `Bearer ${token}`)
    expect(fine.status).toBe(200)
    expect(JSON.parse(fine.text).actor).toBe("github:octocat")
    expect(
      server
        .stdout()
        .split("\n")
        .filter((line) => line.includes('"auth.login_failed"') && line.includes('"127.0.0.2"')),
    ).toHaveLength(10)
  })

  it("answers a login callback 429 to an address after 10 wrong tokens at the API", async () => {
    const guesser = "127.0.0.3"
    for (let i = 0; i < 10; i++) expect((await me(guesser, `Bearer not.a.token${i}`)).status).toBe(401)
    const refused = await requestFrom(guesser, `${server.url}/auth/github/callback?code=x&state=anything`)
    expect(refused.status).toBe(429)
    expect(refused.headers["retry-after"]).toBeDefined()
    // Another address's callback is judged on its own: a bad state is a 400, not a 429.
    expect((await requestFrom("127.0.0.4", `${server.url}/auth/github/callback?code=x&state=anything`)).status).toBe(
      400,
    )
  })
})
