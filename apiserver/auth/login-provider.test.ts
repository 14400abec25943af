import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { codeExchange, nextLink, pagedList, providerJson } from "./login-provider.ts"
import { githubApiUrl } from "./providers/github.ts"

// The shared half of the OAuth providers, over real HTTP on loopback: paging that keeps the
// user's token on the provider's origin, and failures that say where without saying the token.

let server: Server
let base: string
const seen: string[] = []

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push(`${req.url} ${req.headers.authorization}`)
    if (req.url === "/page1") {
      res.writeHead(200, { "Content-Type": "application/json", Link: `<${base}/page2>; rel="next"` }).end("[1, 2]")
    } else if (req.url === "/page2") {
      // A next page elsewhere: the token must not follow it.
      res
        .writeHead(200, { "Content-Type": "application/json", Link: '<http://elsewhere.invalid/page3>; rel="next"' })
        .end("[3]")
    } else if (req.url === "/broken") {
      res.writeHead(500).end("oops")
    } else if (req.url === "/text") {
      res.writeHead(200, { "Content-Type": "text/html" }).end("<html>")
    } else if (req.url === "/token") {
      res.writeHead(503).end()
    } else {
      res.writeHead(404).end()
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
afterAll(() => new Promise((resolve) => server.close(resolve)))

describe("pagedList", () => {
  it("follows Link rel=next on the provider's origin and no further", async () => {
    const items = await pagedList("GitHub", `${base}/page1`, "user-token", (body) => body as unknown[], nextLink)
    expect(items).toEqual([1, 2, 3])
    expect(seen.filter((line) => line.startsWith("/page"))).toEqual([
      "/page1 Bearer user-token",
      "/page2 Bearer user-token",
    ])
  })
})

describe("a provider that fails", () => {
  it("is a 502 naming the provider and the path, never the token", async () => {
    for (const [path, message] of [
      ["/broken", "GitLab answered GET /broken with HTTP 500; the login cannot read the user"],
      ["/text", "GitLab answered GET /text with something that is not JSON"],
    ] as const) {
      const failure = await providerJson("GitLab", `${base}${path}`, "secret-token").catch((error: unknown) => error)
      expect(failure).toMatchObject({ status: 502, message })
    }
    const closed = await providerJson("GitLab", "http://127.0.0.1:1/user", "secret-token").catch(
      (error: unknown) => error,
    )
    expect(closed).toMatchObject({
      status: 502,
      message: expect.stringMatching(/^GitLab could not be reached for \/user/),
    })
    expect(String((closed as Error).message)).not.toContain("secret-token")
  })

  it("at the token endpoint is a 502; an unreachable one too", async () => {
    const settings = { clientId: "id", clientSecret: "secret" }
    const exchange = (tokenUrl: string) =>
      codeExchange("Microsoft", settings, {
        redirectUri: "http://r/cb",
        authorizeUrl: `${base}/a`,
        tokenUrl,
        scopes: [],
      })
    await expect(exchange(`${base}/token`).accessToken("code", "verifier")).rejects.toMatchObject({
      status: 502,
      message: "Microsoft's token endpoint answered HTTP 503 without a token",
    })
    await expect(exchange("http://127.0.0.1:1/token").accessToken("code", "verifier")).rejects.toMatchObject({
      status: 502,
      message: expect.stringMatching(/^Microsoft could not be reached for the token/),
    })
  })
})

describe("the authorization URL", () => {
  it("carries state, a PKCE S256 challenge, the redirect URI and the scopes", () => {
    const url = codeExchange(
      "GitLab",
      { clientId: "id", clientSecret: "s" },
      {
        redirectUri: "https://runnel.example/auth/gitlab/callback",
        authorizeUrl: "https://gitlab.example/oauth/authorize",
        tokenUrl: "https://gitlab.example/oauth/token",
        scopes: ["read_user", "read_api"],
      },
    ).authorizationUrl("the-state", "a-verifier-of-enough-length-for-pkce-0123456789")
    expect(url.origin + url.pathname).toBe("https://gitlab.example/oauth/authorize")
    expect(Object.fromEntries(url.searchParams)).toEqual({
      response_type: "code",
      client_id: "id",
      redirect_uri: "https://runnel.example/auth/gitlab/callback",
      state: "the-state",
      code_challenge_method: "S256",
      code_challenge: expect.stringMatching(/^[\w-]{43}$/),
      scope: "read_user read_api",
    })
  })
})

describe("GitHub's API address", () => {
  it("is api.github.com for github.com and <url>/api/v3 for a GitHub Enterprise Server", () => {
    expect(githubApiUrl("https://github.com")).toBe("https://api.github.com")
    expect(githubApiUrl("https://github.corp.example")).toBe("https://github.corp.example/api/v3")
  })
})
