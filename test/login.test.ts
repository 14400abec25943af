import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { sessionCookies } from "../apiserver/auth/session-cookie.ts"
import { BrowserSession } from "./browser-session.ts"
import { type Standin, startOAuthServer, startStandin } from "./oauth-standins.ts"
import { type Json, type ServerProcess, serverProcesses } from "./server-process.ts"

// The browser login end to end, over real HTTP: a runnel server process with all three providers
// enabled, each pointed at a local stand-in that speaks the provider's real endpoints
// (test/oauth-standins.ts), from the login page to an API call with the issued token.

const sessionSecret = "a-session-secret-of-more-than-32-characters"
const servers = serverProcesses("runnel-login-")
let server: ServerProcess
let url: string
const standins = {} as Record<"github" | "gitlab" | "microsoft", Standin>

beforeAll(async () => {
  standins.github = await startStandin("github")
  standins.gitlab = await startStandin("gitlab")
  standins.microsoft = await startStandin("microsoft")
  server = await startOAuthServer(servers, standins, sessionSecret)
  url = server.url
}, 60_000)

afterAll(async () => {
  servers.cleanUp()
  await Promise.all(Object.values(standins).map((standin) => standin?.close()))
})

/** Logs `session` in with `segment` from the login page, as a browser would; every URL it visited. */
async function logIn(session: BrowserSession, segment: string, next = "/api/me") {
  const page = await session.request(`${url}/auth/login?next=${encodeURIComponent(next)}`)
  expect(page.status).toBe(200)
  const html = await page.text()
  // The button's form: GET /auth/<segment>/login with next as a hidden field.
  expect(html).toContain(`action="/auth/${segment}/login"`)
  return session.follow(`${url}/auth/${segment}/login?next=${encodeURIComponent(next)}`)
}

const bodyOf = (response: Response): Promise<Json> => response.json()
const json = async (response: Response) => ({ status: response.status, body: await bodyOf(response) })
const auditLines = () =>
  server
    .stdout()
    .split("\n")
    .filter((line) => line.includes('"kind":"audit"'))
    .map((line) => JSON.parse(line))

describe("the browser login", () => {
  it("shows one button per enabled provider on the login page, with no external assets", async () => {
    const response = await fetch(`${url}/auth/login`)
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toMatch(/^text\/html/)
    expect(response.headers.get("content-security-policy")).toContain("frame-ancestors 'none'")
    const html = await response.text()
    expect(html.match(/<button type="submit">Log in with [A-Za-z]+<\/button>/g)).toEqual([
      '<button type="submit">Log in with GitHub</button>',
      '<button type="submit">Log in with GitLab</button>',
      '<button type="submit">Log in with Microsoft</button>',
    ])
    expect(html).not.toMatch(/<(script|link|img)\b/)
  })

  it("logs in with GitHub: primary verified email and every organization, then the token works on the API", async () => {
    const session = new BrowserSession()
    const { response, visited } = await logIn(session, "github")
    // The provider was asked with state and a PKCE challenge, and the code exchanged with the client's secret.
    const authorize = standins.github.authorizeRequests[0]
    expect(authorize?.get("state")).toMatch(/.{20,}/)
    expect(authorize?.get("code_challenge_method")).toBe("S256")
    expect(authorize?.get("redirect_uri")).toBe(`${url}/auth/github/callback`)
    expect(authorize?.get("scope")).toBe("read:user user:email read:org")
    expect(standins.github.tokenRequests[0]?.basic).toBe(true)
    expect(standins.github.tokenRequests[0]?.form.get("code_verifier")).toMatch(/.{43,}/)
    expect(visited.at(-1)).toBe(`${url}/api/me`)
    expect(await json(response)).toEqual({
      status: 200,
      body: {
        actor: "github:octocat",
        authenticated: true,
        Provider: "github",
        UserID: "583231",
        NickName: "octocat",
        Name: "The Octocat",
        Email: "octocat@corp.example",
        Organizations: ["corp", "corp-infra", "open-source"],
        Groups: [],
      },
    })
    const cookie = session.setCookies.find((line) => line.startsWith("runnel_session="))
    expect(cookie).toMatch(/; path=\/;/)
    expect(cookie).toMatch(/; samesite=lax/)
    expect(cookie).toMatch(/; httponly/)
    expect(cookie).not.toMatch(/; secure/) // the callback URL is http
    // The cookie holds runnel's JWT, encrypted: as a Bearer token it is an API client's credential.
    const token = sessionCookies(sessionSecret).open(session.cookies.get("runnel_session") as string) as string
    expect(JSON.parse(Buffer.from(token.split(".")[0] as string, "base64url").toString())).toEqual({
      alg: "HS256",
      typ: "JWT",
    })
    const pipelines = await fetch(`${url}/api/pipelines`, { headers: { Authorization: `Bearer ${token}` } })
    expect(pipelines.status).toBe(200)
    const me = await fetch(`${url}/api/me`, { headers: { Authorization: `Bearer ${token}` } })
    expect((await bodyOf(me)).actor).toBe("github:octocat")
    expect(auditLines()).toContainEqual(
      expect.objectContaining({ msg: "auth.login", actor: "github:octocat", provider: "github", via: "browser" }),
    )
  })

  it("logs in with GitLab: the user and the full paths of their groups, across pages", async () => {
    const session = new BrowserSession()
    const { response } = await logIn(session, "gitlab")
    expect(standins.gitlab.authorizeRequests[0]?.get("code_challenge_method")).toBe("S256")
    expect(await json(response)).toEqual({
      status: 200,
      body: {
        actor: "gitlab:gitlab-alice",
        authenticated: true,
        Provider: "gitlab",
        UserID: "42",
        NickName: "gitlab-alice",
        Name: "Alice Liddell",
        Email: "alice@corp.example",
        Organizations: [],
        Groups: ["platform", "platform/deploy-team", "docs"],
      },
    })
  })

  it("logs in with Microsoft at the tenant's v2.0 endpoints: the user and their groups from Graph, without roles", async () => {
    const session = new BrowserSession()
    const { response, visited } = await logIn(session, "microsoftonline")
    expect(visited[1]).toMatch(new RegExp(`^${standins.microsoft.url}/corp-tenant/oauth2/v2.0/authorize\\?`))
    expect(standins.microsoft.authorizeRequests[0]?.get("redirect_uri")).toBe(`${url}/auth/microsoftonline/callback`)
    expect(await json(response)).toEqual({
      status: 200,
      body: {
        actor: "microsoftonline:bob@corp.onmicrosoft.com",
        authenticated: true,
        Provider: "microsoftonline",
        UserID: "6f1c2a1e-0000-4000-8000-00000000b0b0",
        NickName: "bob@corp.onmicrosoft.com",
        Name: "Bob Builder",
        Email: "bob@corp.example",
        Organizations: [],
        Groups: ["0b1e-group-1", "deploy-team", "0b1e-group-2", "engineering"],
      },
    })
  })

  it("returns to the login page, which names the user, when no next is given", async () => {
    const session = new BrowserSession()
    const { response, visited } = await session.follow(`${url}/auth/gitlab/login`)
    expect(visited.at(-1)).toBe(`${url}/auth/login`)
    expect(await response.text()).toContain("Logged in as <strong>Alice Liddell</strong> (gitlab:gitlab-alice)")
  })

  it("logs out with a POST from its own page, after which the cookie is gone and the API answers 401", async () => {
    const session = new BrowserSession()
    await logIn(session, "github")
    expect((await session.request(`${url}/api/me`)).status).toBe(200)
    expect(await (await session.request(`${url}/auth/logout`)).text()).toContain(
      '<form method="post" action="/auth/logout">',
    )
    const out = await session.request(`${url}/auth/logout`, { method: "POST", origin: url })
    expect(out.status).toBe(303)
    expect(out.headers.get("location")).toBe("/auth/login")
    expect(session.cookies.has("runnel_session")).toBe(false)
    expect((await session.request(`${url}/api/me`)).status).toBe(401)
  })
})

// The tests below fail or start logins on purpose, each from its own address (127.0.0.x): one
// address doing all of it within a minute would be answered 429 (docs/auth.md "Rate limiting").
let lastOctet = 9
const ownAddress = () => `127.0.0.${++lastOctet}`

describe("the browser login refuses", () => {
  it("an unknown provider in a path with 404 naming the enabled ones", async () => {
    for (const path of ["/auth/bitbucket/login", "/auth/bitbucket/callback?state=x&code=y", "/auth/microsoft/login"]) {
      const answer = await json(await fetch(`${url}${path}`, { redirect: "manual" }))
      expect(answer.status).toBe(404)
      expect(answer.body.error).toMatch(
        /login provider ".*" not found: this server logs in with github, gitlab, microsoftonline/,
      )
    }
  })

  it("a next that is not a path on this server with 400, never a redirect elsewhere", async () => {
    for (const next of [
      "//evil.example/x",
      "/\\evil.example",
      "https://evil.example/",
      "javascript:alert(1)",
      "evil",
      "/a b",
      "/%0a\nx",
    ]) {
      for (const path of ["/auth/github/login", "/auth/login"]) {
        const response = await fetch(`${url}${path}?next=${encodeURIComponent(next)}`, { redirect: "manual" })
        expect(response.status, `${path} next=${next}`).toBe(400)
        expect((await bodyOf(response)).error).toMatch(/^next must be a path on this server/)
      }
    }
  })

  it("honours a next that is a path with a query", async () => {
    const { visited } = await logIn(new BrowserSession(ownAddress()), "github", "/api/pipelines?x=1")
    expect(visited.at(-1)).toBe(`${url}/api/pipelines?x=1`)
  })

  it("a callback without state, with an unknown one, or replayed, with 400", async () => {
    const session = new BrowserSession(ownAddress())
    const noState = await json(await session.request(`${url}/auth/github/callback?code=abc`))
    expect(noState).toEqual({ status: 400, body: { error: expect.stringMatching(/has no state/) } })
    const unknown = await json(await session.request(`${url}/auth/github/callback?code=abc&state=made-up`))
    expect(unknown).toEqual({
      status: 400,
      body: { error: expect.stringMatching(/state is unknown, expired or already used/) },
    })

    const toProvider = await session.request(`${url}/auth/github/login`)
    const toCallback = await fetch(toProvider.headers.get("location") as string, { redirect: "manual" })
    const callback = toCallback.headers.get("location") as string
    expect((await session.request(callback)).status).toBe(302)
    const replayed = await session.request(callback)
    expect(replayed.status).toBe(400)
    expect((await bodyOf(replayed)).error).toMatch(/already used/)
  })

  it("a callback in another browser than the one that started the login with 400", async () => {
    const address = ownAddress()
    const toProvider = await new BrowserSession(address).request(`${url}/auth/gitlab/login`)
    const toCallback = await fetch(toProvider.headers.get("location") as string, { redirect: "manual" })
    const other = await new BrowserSession(address).request(toCallback.headers.get("location") as string)
    expect(other.status).toBe(400)
    expect((await bodyOf(other)).error).toMatch(/started in another browser/)
  })

  it("a callback for another provider than the login's with 400", async () => {
    const session = new BrowserSession(ownAddress())
    const toProvider = await session.request(`${url}/auth/gitlab/login`)
    const state = new URL(toProvider.headers.get("location") as string).searchParams.get("state") as string
    const answer = await session.request(`${url}/auth/github/callback?code=x&state=${state}`)
    expect(answer.status).toBe(400)
  })

  it("a callback without a code, or with one the provider refuses, with 400, audited without the code", async () => {
    const session = new BrowserSession(ownAddress())
    let state = new URL(
      (await session.request(`${url}/auth/github/login`)).headers.get("location") as string,
    ).searchParams.get("state")
    const noCode = await session.request(`${url}/auth/github/callback?state=${state}`)
    expect(noCode.status).toBe(400)
    expect((await bodyOf(noCode)).error).toMatch(/has no code/)

    state = new URL(
      (await session.request(`${url}/auth/github/login`)).headers.get("location") as string,
    ).searchParams.get("state")
    const badCode = await session.request(
      `${url}/auth/github/callback?state=${state}&code=not-a-code-the-provider-gave`,
    )
    expect(badCode.status).toBe(400)
    expect((await bodyOf(badCode)).error).toBe(
      "GitHub refused the login (bad_verification_code); start again at /auth/login",
    )
    const failures = auditLines().filter((line) => line.msg === "auth.login_failed")
    expect(failures).toContainEqual(expect.objectContaining({ provider: "github", actor: "anonymous" }))
    expect(server.stdout()).not.toContain("not-a-code-the-provider-gave")
  })

  it("a login whose provider API fails with 502 naming the provider and the path, never the token", async () => {
    standins.microsoft.failApi = true
    try {
      const { response } = await new BrowserSession(ownAddress()).follow(`${url}/auth/microsoftonline/login`)
      expect(response.status).toBe(502)
      expect((await bodyOf(response)).error).toMatch(
        /^Microsoft answered GET \/v1.0\/me(\/memberOf)? with HTTP 500; the login cannot read the user$/,
      )
      expect(auditLines()).toContainEqual(
        expect.objectContaining({
          msg: "auth.login_failed",
          provider: "microsoftonline",
          reason: expect.stringContaining("HTTP 500"),
        }),
      )
    } finally {
      standins.microsoft.failApi = false
    }
  })

  it("a login the user declines at the provider with 403", async () => {
    standins.gitlab.deny = true
    try {
      const { response } = await new BrowserSession(ownAddress()).follow(`${url}/auth/gitlab/login`)
      expect(response.status).toBe(403)
      expect((await bodyOf(response)).error).toBe(
        "GitLab did not authorize the login (access_denied); start again at /auth/login",
      )
    } finally {
      standins.gitlab.deny = false
    }
  })
})

describe("requests authenticated by the session cookie", () => {
  it("are refused (403) when they change something from another site or say nothing of where they come from", async () => {
    const session = new BrowserSession(ownAddress())
    await logIn(session, "github")
    const noOrigin = await session.request(`${url}/api/pipelines/nothing/pause`, { method: "POST" })
    expect(noOrigin.status).toBe(403)
    expect((await bodyOf(noOrigin)).error).toMatch(/must say where it comes from/)
    const foreign = await session.request(`${url}/api/pipelines/nothing/pause`, {
      method: "POST",
      origin: "https://evil.example",
    })
    expect(foreign.status).toBe(403)
    expect((await bodyOf(foreign)).error).toMatch(/came from another site \(https:\/\/evil.example\)/)
    // From the server's own pages it goes through to the route, which does not know the pipeline.
    const own = await session.request(`${url}/api/pipelines/nothing/pause`, { method: "POST", origin: url })
    expect(own.status).toBe(404)
    // Reads are not state-changing.
    expect((await session.request(`${url}/api/pipelines`)).status).toBe(200)
  })

  it("do not concern API clients with a Bearer header, whatever their Origin", async () => {
    const session = new BrowserSession(ownAddress())
    await logIn(session, "gitlab")
    const token = sessionCookies(sessionSecret).open(session.cookies.get("runnel_session") as string) as string
    const response = await fetch(`${url}/api/pipelines/nothing/pause`, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, Origin: "https://evil.example" },
    })
    expect(response.status).toBe(404)
  })

  it("GET /api/me answers 401 without credentials", async () => {
    expect((await fetch(`${url}/api/me`)).status).toBe(401)
  })
})
