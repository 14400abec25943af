import { createHash, randomBytes } from "node:crypto"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { freePort } from "./browser-session.ts"
import type { ServerProcess, serverProcesses } from "./server-process.ts"

/**
 * Local stand-ins for the three OAuth providers, written from their API
 * documentation and speaking their real endpoints on loopback:
 *
 * - GitHub (OAuth apps, REST): GET /login/oauth/authorize, POST /login/oauth/access_token (a refused
 *   code is 200 with {"error": "bad_verification_code"}, as GitHub answers), and under /api/v3 (a
 *   GitHub Enterprise Server's API root) GET /user, /user/emails, /user/orgs (paged with Link).
 * - GitLab (OAuth 2 with PKCE): GET /oauth/authorize, POST /oauth/token, GET /api/v4/user and
 *   /api/v4/groups (paged with Link).
 * - Microsoft identity platform v2.0: GET /<tenant>/oauth2/v2.0/authorize, POST
 *   /<tenant>/oauth2/v2.0/token, and Microsoft Graph's GET /v1.0/me and /v1.0/me/memberOf (paged
 *   with @odata.nextLink) on the same server.
 *
 * The user consents at once (the authorize endpoint redirects back with a code), unless `deny` is
 * set (then `error=access_denied`). Codes are single-use and bound to the redirect URI and the PKCE
 * challenge; the token endpoint checks the client's id and secret (HTTP Basic, or the form).
 * Pages are `pageSize` items long, so that paging is exercised.
 */
export type StandinKind = "github" | "gitlab" | "microsoft"

export type Standin = {
  readonly url: string
  readonly clientId: string
  readonly clientSecret: string
  /** What the authorize endpoint was asked, last request first. */
  readonly authorizeRequests: URLSearchParams[]
  /** How the token endpoint was called: the form and whether the client authenticated with Basic. */
  readonly tokenRequests: { form: URLSearchParams; basic: boolean }[]
  /** When true, the authorize endpoint answers access_denied. */
  deny: boolean
  /** When true, the user API answers 500. */
  failApi: boolean
  close(): Promise<void>
}

const pageSize = 2

export async function startStandin(kind: StandinKind, tenant = "corp-tenant"): Promise<Standin> {
  const clientId = `${kind}-client-id`
  const clientSecret = `${kind}-client-secret-${randomBytes(4).toString("hex")}`
  const codes = new Map<string, { redirectUri: string; challenge: string; method: string }>()
  const tokens = new Set<string>()
  const paths = endpoints(kind, tenant)
  let base = ""
  const standin: Standin = {
    url: "",
    clientId,
    clientSecret,
    authorizeRequests: [],
    tokenRequests: [],
    deny: false,
    failApi: false,
    close: () => close(server),
  }

  const server = createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", base)
    try {
      if (req.method === "GET" && url.pathname === paths.authorize) {
        standin.authorizeRequests.unshift(url.searchParams)
        const query = url.searchParams
        const redirectUri = query.get("redirect_uri") ?? ""
        if (query.get("client_id") !== clientId || query.get("response_type") !== "code" || redirectUri === "") {
          return json(res, 400, {
            error: "invalid_request",
            error_description: "client_id, response_type, redirect_uri",
          })
        }
        const back = new URL(redirectUri)
        back.searchParams.set("state", query.get("state") ?? "")
        if (standin.deny) {
          back.searchParams.set("error", "access_denied")
          back.searchParams.set("error_description", "The user has denied your application access.")
        } else {
          const code = randomBytes(12).toString("hex")
          codes.set(code, {
            redirectUri,
            challenge: query.get("code_challenge") ?? "",
            method: query.get("code_challenge_method") ?? "",
          })
          back.searchParams.set("code", code)
        }
        res.writeHead(302, { Location: back.toString() }).end()
        return
      }
      if (req.method === "POST" && url.pathname === paths.token) {
        const form = new URLSearchParams(await text(req))
        const basic = (req.headers.authorization ?? "").startsWith("Basic ")
        standin.tokenRequests.unshift({ form, basic })
        const [id, secret] = basic
          ? Buffer.from((req.headers.authorization as string).slice(6), "base64")
              .toString()
              .split(":")
          : [form.get("client_id"), form.get("client_secret")]
        if (id !== clientId || secret !== clientSecret) return json(res, 401, { error: "invalid_client" })
        const code = form.get("code") ?? ""
        const issued = codes.get(code)
        codes.delete(code)
        const verifier = form.get("code_verifier") ?? ""
        const verified =
          issued !== undefined &&
          issued.redirectUri === form.get("redirect_uri") &&
          form.get("grant_type") === "authorization_code" &&
          (issued.challenge === "" ||
            (issued.method === "S256" &&
              createHash("sha256").update(verifier).digest("base64url") === issued.challenge))
        if (!verified) {
          // GitHub answers a bad code with 200; the others with RFC 6749's 400.
          return kind === "github"
            ? json(res, 200, {
                error: "bad_verification_code",
                error_description: "The code passed is incorrect or expired.",
              })
            : json(res, 400, {
                error: "invalid_grant",
                error_description: "The provided authorization grant is invalid.",
              })
        }
        const token = randomBytes(16).toString("hex")
        tokens.add(token)
        return json(res, 200, { access_token: token, token_type: "bearer", scope: form.get("scope") ?? "" })
      }
      const bearer = (req.headers.authorization ?? "").replace(/^Bearer /, "")
      if (!tokens.has(bearer)) return json(res, 401, { message: "Bad credentials" })
      if (standin.failApi) return json(res, 500, { message: "Server Error" })
      const api = apis[kind][url.pathname]
      if (req.method !== "GET" || api === undefined) return json(res, 404, { message: "Not Found" })
      const body = api
      if (!Array.isArray(body)) return json(res, 200, body)
      const page = Number(url.searchParams.get("page") ?? "1")
      const items = body.slice((page - 1) * pageSize, page * pageSize)
      const more = page * pageSize < body.length
      const next = new URL(url)
      next.searchParams.set("page", String(page + 1))
      if (kind === "microsoft") {
        return json(res, 200, { value: items, ...(more ? { "@odata.nextLink": next.toString() } : {}) })
      }
      return json(res, 200, items, more ? { Link: `<${next}>; rel="next", <${url}>; rel="first"` } : {})
    } catch (error) {
      json(res, 500, { message: String(error) })
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return Object.assign(standin, { url: base })
}

function endpoints(kind: StandinKind, tenant: string) {
  switch (kind) {
    case "github":
      return { authorize: "/login/oauth/authorize", token: "/login/oauth/access_token" }
    case "gitlab":
      return { authorize: "/oauth/authorize", token: "/oauth/token" }
    case "microsoft":
      return { authorize: `/${tenant}/oauth2/v2.0/authorize`, token: `/${tenant}/oauth2/v2.0/token` }
  }
}

/** The users the stand-ins know, as each provider's API shows them. */
const apis: Record<StandinKind, Record<string, unknown>> = {
  github: {
    "/api/v3/user": { login: "octocat", id: 583231, name: "The Octocat", email: null },
    "/api/v3/user/emails": [
      { email: "octocat@old.example", primary: false, verified: true, visibility: null },
      { email: "unverified@corp.example", primary: false, verified: false, visibility: null },
      { email: "octocat@corp.example", primary: true, verified: true, visibility: "public" },
    ],
    "/api/v3/user/orgs": [{ login: "corp" }, { login: "corp-infra" }, { login: "open-source" }],
  },
  gitlab: {
    "/api/v4/user": { id: 42, username: "gitlab-alice", name: "Alice Liddell", email: "alice@corp.example" },
    "/api/v4/groups": [{ full_path: "platform" }, { full_path: "platform/deploy-team" }, { full_path: "docs" }],
  },
  microsoft: {
    "/v1.0/me": {
      id: "6f1c2a1e-0000-4000-8000-00000000b0b0",
      displayName: "Bob Builder",
      mail: "bob@corp.example",
      userPrincipalName: "bob@corp.onmicrosoft.com",
    },
    "/v1.0/me/memberOf": [
      { "@odata.type": "#microsoft.graph.group", id: "0b1e-group-1", displayName: "deploy-team" },
      { "@odata.type": "#microsoft.graph.directoryRole", id: "role-1", displayName: "Global Reader" },
      { "@odata.type": "#microsoft.graph.group", id: "0b1e-group-2", displayName: "engineering" },
    ],
  },
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "Content-Type": "application/json", ...headers }).end(JSON.stringify(body))
}

async function text(req: IncomingMessage): Promise<string> {
  let body = ""
  for await (const chunk of req) body += chunk
  return body
}

function close(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  })
}

/**
 * `runnel server` in OAuth mode with each stand-in as its provider, on a port
 * chosen first: the callback URL (the server's public URL) must be known
 * before the server starts.
 */
export async function startOAuthServer(
  servers: ReturnType<typeof serverProcesses>,
  standins: Partial<Record<StandinKind, Standin>>,
  sessionSecret: string,
): Promise<ServerProcess> {
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const flags = Object.entries(standins).flatMap(([kind, standin]) => [
    `--oauth-${kind}-client-id`,
    standin.clientId,
    `--oauth-${kind}-client-secret`,
    standin.clientSecret,
    ...(kind === "microsoft"
      ? [
          "--oauth-microsoft-tenant",
          "corp-tenant",
          "--oauth-microsoft-authority",
          standin.url,
          "--oauth-microsoft-graph-url",
          standin.url,
        ]
      : [`--oauth-${kind}-url`, standin.url]),
  ])
  return servers.start([
    "--port",
    String(port),
    "--oauth-session-secret",
    sessionSecret,
    "--oauth-callback-url",
    url,
    ...flags,
  ])
}
