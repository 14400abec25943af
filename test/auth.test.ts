import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import type { Layer } from "@koa/router"
import { KubeConfig } from "@kubernetes/client-node"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { SignJWT } from "jose"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AccessPolicy } from "../apiserver/access.ts"
import { createApiServer } from "../apiserver/app.ts"
import type { AuditEntry, LoginAuditEntry } from "../apiserver/audit.ts"
import { authenticator } from "../apiserver/auth/authenticate.ts"
import { FailureCounter } from "../apiserver/auth/failure-counter.ts"
import { issueToken } from "../apiserver/auth/session-token.ts"
import { testUser } from "../apiserver/auth/test-user.fixture.ts"
import { OwnWrites } from "../apiserver/kubernetes-audit.ts"
import { startResourceIndex } from "../apiserver/resource-index.ts"
import { accessRule } from "../apiserver/route-access.ts"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import type { AuthSettings } from "../lib/config/auth.ts"
import { quietLog } from "../lib/core/log.ts"
import { ResourceClient } from "../lib/kube/resource-client.ts"
import { pipelineLabel, runnelApiVersion } from "../lib/kube/resources.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { openSqliteSecretStore } from "../lib/secrets/sqlite-secret-store.ts"

// Authentication and RBAC over real HTTP: one embedded Kubernetes API and one set of stores, served by
// three API servers, one per mode (open, Basic Auth, OAuth with --server-rbac), so that the same pipelines
// are seen by every kind of user. No operator runs: runs stay queued, which every route here is content with.

const sessionSecret = "the auth test's session secret: 32+ characters"
const rbac = '"release" in Groups'
const serverRbac = '!("blocked" in Groups)'
const script = "export const pipeline = async () => { console.log('hello') }\n"
const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`

const oauth: AuthSettings = {
  mode: "oauth",
  sessionSecret,
  callbackUrl: "http://127.0.0.1:1",
  providers: [{ name: "github", clientId: "id", clientSecret: "secret", url: "http://127.0.0.1:1" }],
  serverRbac,
}

type Answer = { status: number; headers: Headers; body: unknown; text: string }

describe("authentication and RBAC", () => {
  const closers: (() => Promise<unknown> | unknown)[] = []
  const urls: Record<"open" | "basic" | "oauth", string> = { open: "", basic: "", oauth: "" }
  const audit: AuditEntry[] = []
  const tokens: Record<string, string> = {}
  let resources: ResourceClient
  let oauthApp: ReturnType<typeof createApiServer>
  let runId = ""
  let common: Omit<Parameters<typeof createApiServer>[0], "authenticate" | "authMode" | "policy">
  let gateId = ""
  let scheduleName = ""

  const serve = async (handler: Parameters<typeof createServer>[1]) => {
    const http = createServer(handler)
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
    closers.push(
      () => new Promise((resolve) => http.close(resolve)),
      () => http.closeAllConnections(),
    )
    return `http://127.0.0.1:${(http.address() as AddressInfo).port}`
  }

  const send = async (
    base: string,
    method: string,
    path: string,
    authorization?: string,
    body?: unknown,
  ): Promise<Answer> => {
    const abort = new AbortController()
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...(authorization === undefined ? {} : { Authorization: authorization }),
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: abort.signal,
    })
    // An event stream never ends while its run waits for an operator: its status is the answer.
    if (response.headers.get("content-type")?.startsWith("text/event-stream")) {
      abort.abort()
      return { status: response.status, headers: response.headers, body: undefined, text: "" }
    }
    const text = await response.text()
    let parsed: unknown
    try {
      parsed = text === "" ? undefined : JSON.parse(text)
    } catch {
      parsed = undefined
    }
    return { status: response.status, headers: response.headers, body: parsed, text }
  }
  const bearer = (nick: string) => `Bearer ${tokens[nick]}`

  beforeAll(async () => {
    const embedded = createEmbeddedApi({ db: ":memory:", crds: loadCrds(join(import.meta.dirname, "../crds")) })
    const kubeBase = await serve((req, res) => {
      if (!embedded.handle(req, res)) res.writeHead(404).end()
    })
    closers.push(() => embedded.close())
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromOptions({
      clusters: [{ name: "e", server: `${kubeBase}/k8s`, skipTLSVerify: true }],
      users: [{ name: "u" }],
      contexts: [{ name: "c", cluster: "e", user: "u", namespace: "default" }],
      currentContext: "c",
    })
    const logs = await openSqliteLogStore(":memory:")
    const secrets = await openSqliteSecretStore({ path: ":memory:", passphrase: "test passphrase" })
    closers.push(
      () => logs.close(),
      () => secrets.close(),
    )
    resources = new ResourceClient(kubeConfig, "default")
    const index = await startResourceIndex({ kubeConfig, client: resources, log: quietLog })
    closers.push(() => index.stop())
    common = {
      resources,
      index,
      logs,
      secrets,
      defaultDriver: "native",
      allowedDrivers: ["native"],
      maxQueueSize: 100,
      features: ["webhooks", "secrets", "gates", "schedules"],
      maxBodyBytes: 1 << 20,
      webhookTimeoutMs: 1000,
      webhookMaxAgeMs: 60_000,
      mcpAllowActions: true,
      log: quietLog,
      audit: (entry: AuditEntry | LoginAuditEntry) => {
        if ("pipeline" in entry) audit.push(entry)
      },
      own: new OwnWrites(),
      // The matrix fails hundreds of times from one address; the limit has its own test below.
      failures: new FailureCounter({ failures: 1_000_000, windowMs: 1000 }),
    }
    const modes: [keyof typeof urls, AuthSettings][] = [
      ["open", { mode: "open" }],
      ["basic", { mode: "basic", username: "admin", password: "s3cret-password" }],
      ["oauth", oauth],
    ]
    for (const [name, auth] of modes) {
      const app = createApiServer({
        ...common,
        authenticate: authenticator(auth),
        authMode: auth.mode,
        policy: new AccessPolicy({ serverRbac: auth.serverRbac, log: quietLog }),
      })
      if (name === "oauth") oauthApp = app
      urls[name] = await serve(app.callback())
    }
    for (const [nick, groups] of [
      ["releaser", ["release"]],
      ["stranger", []],
      ["outsider", ["release", "blocked"]],
    ] as const) {
      tokens[nick] = await issueToken(sessionSecret, testUser(nick, groups))
    }
    // The fixtures: "guarded" (only the release group may see it) with a secret, a run, a schedule and a gate; "plain".
    const put = await send(urls.oauth, "PUT", "/api/pipelines/guarded", bearer("releaser"), {
      content: script,
      rbac_expression: rbac,
      secrets: { TOKEN: "t0ken-value" },
    })
    expect(put.status).toBe(201)
    expect(
      (await send(urls.basic, "PUT", "/api/pipelines/plain", basic("admin", "s3cret-password"), { content: script }))
        .status,
    ).toBe(201)
    const trigger = await send(urls.oauth, "POST", "/api/pipelines/guarded/trigger", bearer("releaser"))
    expect(trigger.status).toBe(202)
    runId = (trigger.body as { run_id: string }).run_id
    scheduleName = "guarded-nightly"
    await resources.createSchedule({
      apiVersion: runnelApiVersion,
      kind: "Schedule",
      metadata: { name: scheduleName, labels: { [pipelineLabel]: "guarded" } },
      spec: { pipelineRef: { name: "guarded" }, jobName: "", type: "cron", expression: "0 3 * * *" },
    })
    gateId = `${runId}-deploy`
    await resources.createGate({
      apiVersion: runnelApiVersion,
      kind: "Gate",
      metadata: { name: gateId, labels: { [pipelineLabel]: "guarded" } },
      spec: { runRef: { name: runId }, name: "deploy" },
    })
  }, 60_000)
  afterAll(async () => {
    for (const close of closers.reverse()) await close()
  })

  /** Every route of the OAuth app's routers, with the check in front of its handler. */
  const routes = () =>
    oauthApp.middleware.flatMap((middleware) => {
      const router = (middleware as { router?: { stack: Layer[] } }).router
      return (router?.stack ?? []).map((layer) => ({
        method: layer.methods.find((method) => method !== "HEAD") ?? "GET",
        path: String(layer.path),
        rule: layer.stack.map((fn) => (fn as { [accessRule]?: string })[accessRule]).find((tag) => tag !== undefined),
      }))
    })

  it("gives every route of the router an access check, so a route added without one fails here", () => {
    const all = routes()
    expect(all.length).toBeGreaterThan(25)
    expect(all.filter((route) => route.rule === undefined)).toEqual([])
    // Only the incoming webhook goes without a user, authenticated by its signature instead.
    expect(all.filter((route) => route.rule === "signature").map((route) => route.path)).toEqual([
      "/api/webhooks/:pipeline_id",
    ])
    // /auth is how one logs in: no user yet (here without OAuth providers, one route answering 404).
    for (const route of all.filter((candidate) => candidate.rule === "login")) expect(route.path).toMatch(/auth/)
    // The web UI's page and assets hold no data: never an API path.
    for (const route of all.filter((candidate) => candidate.rule === "page")) {
      expect(route.path).not.toMatch(/^\/(api|auth|mcp)(\/|$)/)
    }
  })

  /** Routes that ask for a user: all but the webhook (its signature), /auth (how one logs in) and the UI's page. */
  const asksForUser = (route: { rule?: string }) =>
    route.rule !== "signature" && route.rule !== "login" && route.rule !== "page"

  /** A request on `route` about the guarded pipeline (its run, gate, schedule, secret). */
  const requestOn = (route: { method: string; path: string }) => {
    const path = route.path
      .replace(/^\/api\/pipelines\/:(name|id)/, "/api/pipelines/guarded")
      .replace(":key", "TOKEN")
      .replace(/^\/api\/runs\/:id/, `/api/runs/${runId}`)
      .replace(/^\/api\/gates\/:id/, `/api/gates/${gateId}`)
      .replace(/^\/api\/schedules\/:id/, `/api/schedules/${scheduleName}`)
    const body =
      route.method === "GET"
        ? undefined
        : route.method === "PUT" && path.startsWith("/api/pipelines/")
          ? { content: script, rbac_expression: rbac }
          : path.endsWith("/enabled")
            ? { enabled: true }
            : path.startsWith("/api/gates/")
              ? { comment: 5 } // refused by the handler (400) once access is granted, so nothing is decided
              : route.method === "POST" && path === "/api/pipelines"
                ? { name: "guarded", content: script }
                : {}
    return { path, body }
  }
  /** The user rule's routes answer a list or the server's facts; the others name the guarded pipeline. */
  const names = (route: { rule?: string; method: string; path: string }) =>
    route.rule !== "user" || (route.method === "POST" && route.path === "/api/pipelines")

  /** Every route as a user the guarded pipeline refuses: 403 with `reason` where it is named, lists without it. */
  const refusedEverywhere = async (base: string, authorization: string, reason: string) => {
    for (const route of routes().filter(asksForUser)) {
      const { path, body } = requestOn(route)
      const answer = await send(base, route.method, path, authorization, body)
      const what = `${route.method} ${route.path}`
      if (names(route)) {
        expect(answer.status, what).toBe(403)
        expect(answer.body, what).toEqual({ error: expect.stringContaining(reason) })
      } else {
        expect(answer.status, what).toBe(200)
        expect(answer.text, what).not.toContain("guarded")
        expect(answer.text, what).not.toContain(runId)
      }
    }
  }

  it("refuses every route that names a pipeline to a user failing its rbac_expression (403), and lists nothing of it", () =>
    refusedEverywhere(urls.oauth, bearer("stranger"), "github:stranger"))

  it("refuses every route that names a pipeline with an rbac_expression to the Basic Auth user (403)", () =>
    refusedEverywhere(urls.basic, basic("admin", "s3cret-password"), "Basic Auth users"))

  it("filters a list asked about the hidden pipeline by name or id down to nothing", async () => {
    const id = ((await send(urls.oauth, "GET", "/api/pipelines/guarded", bearer("releaser"))).body as { id: string }).id
    for (const key of ["guarded", id]) {
      const runs = await send(urls.oauth, "GET", `/api/runs?pipeline_id=${key}`, bearer("stranger"))
      expect(runs.body).toMatchObject({ items: [], total_items: 0 })
      const own = await send(urls.oauth, "GET", `/api/runs?pipeline_id=${key}`, bearer("releaser"))
      expect(own.body).toMatchObject({ items: [expect.objectContaining({ id: runId })], total_items: 1 })
    }
    const gates = await send(urls.oauth, "GET", `/api/gates?run_id=${runId}`, bearer("stranger"))
    expect(gates.body).toEqual([])
  })

  it("refuses every route to a user failing --server-rbac (403), even one the pipeline lets in", async () => {
    for (const route of routes().filter(asksForUser)) {
      const { path, body } = requestOn(route)
      const answer = await send(urls.oauth, route.method, path, bearer("outsider"), body)
      expect(answer.status, `${route.method} ${route.path}`).toBe(403)
      expect(answer.body).toEqual({ error: expect.stringContaining("--server-rbac") })
    }
  })

  it("answers every request in open access as anonymous, pipeline RBAC not applying", async () => {
    const answer = await send(urls.open, "GET", "/api/pipelines/guarded")
    expect(answer.status).toBe(200)
    expect(answer.body).toMatchObject({ name: "guarded", rbac_expression: rbac })
  })

  it("refuses missing and malformed credentials with 401, the mode's challenge and what was wrong", async () => {
    const other = async (claims: Record<string, unknown>, secret = sessionSecret, alg = "HS256") =>
      new SignJWT({ nick_name: "x", provider: "github", ...claims })
        .setProtectedHeader({ alg })
        .setSubject("x")
        .setIssuedAt()
        .sign(new TextEncoder().encode(secret))
    const segment = (text: string) => Buffer.from(text).toString("base64url")
    const cases: [keyof typeof urls, string | undefined, RegExp][] = [
      ["oauth", undefined, /^authentication required/],
      ["oauth", "Bearer", /no Bearer credentials after the scheme/],
      ["oauth", "eyJhbGciOiJIUzI1NiJ9.e30.c2ln", /has no scheme/],
      ["oauth", "Token abc", /must use the Bearer scheme, not Token/],
      ["oauth", "Bearer a.b", /not a well-formed JWT/],
      ["oauth", `Bearer ${segment('{"alg":"HS256"}')}.${segment("{not json")}.c2ln`, /not a well-formed JWT/],
      ["oauth", `Bearer ${segment('{"alg":"none"}')}.${segment('{"sub":"x"}')}.`, /not signed with HS256/],
      ["oauth", `Bearer ${await other({ iss: "runnel", exp: 1 })}`, /has expired/],
      ["oauth", `Bearer ${await other({ iss: "someone-else", exp: 4e9 })}`, /was not issued by runnel/],
      [
        "oauth",
        `Bearer ${await other({ iss: "runnel", exp: 4e9 }, "another secret of 32+ characters!!")}`,
        /bad signature/,
      ],
      ["basic", undefined, /^authentication required: send an Authorization: Basic header/],
      ["basic", "Basic !!!not-base64", /not base64 of user:password/],
      ["basic", `Basic ${Buffer.from("no-colon").toString("base64")}`, /no colon/],
      ["basic", basic("admin", "wrong-password"), /^wrong user name or password$/],
      ["basic", `Bearer ${tokens.releaser}`, /must use the Basic scheme, not Bearer/],
    ]
    for (const [mode, authorization, message] of cases) {
      const answer = await send(urls[mode], "GET", "/api/pipelines", authorization)
      const what = `${mode} ${authorization}`
      expect(answer.status, what).toBe(401)
      expect(answer.body, what).toEqual({ error: expect.stringMatching(message) })
      // Never the secret expected, nor the credentials sent.
      expect(answer.text, what).not.toContain(sessionSecret)
      expect(answer.text, what).not.toContain("s3cret-password")
      expect(answer.text, what).not.toContain("wrong-password")
      const challenge = answer.headers.get("www-authenticate")
      if (mode === "basic") expect(challenge, what).toBe('Basic realm="runnel", charset="UTF-8"')
      else if (authorization === undefined) expect(challenge).toBe('Bearer realm="runnel"')
      else expect(challenge, what).toMatch(/^Bearer realm="runnel", error="invalid_token", error_description="[^"]+"$/)
    }
    // Webhooks are authenticated by their signatures, not a user.
    expect((await send(urls.oauth, "POST", "/api/webhooks/plain", undefined, {})).status).toBe(202)
  })

  it("slows an address after repeated failures: 429 with Retry-After, even for good credentials", async () => {
    const limited = await serve(
      createApiServer({
        ...common,
        authenticate: authenticator(oauth),
        authMode: "oauth",
        policy: new AccessPolicy({ log: quietLog }),
        failures: new FailureCounter({ failures: 3, windowMs: 60_000 }),
      }).callback(),
    )
    for (let attempt = 1; attempt <= 3; attempt++) {
      expect((await send(limited, "GET", "/api/pipelines", "Bearer a.b")).status).toBe(401)
    }
    const refused = await send(limited, "GET", "/api/pipelines", bearer("releaser"))
    expect(refused.status).toBe(429)
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(50)
    expect(refused.body).toEqual({ error: expect.stringMatching(/too many failed authentication attempts/) })
  })

  it("compiles a pipeline's rbac_expression when it is set (400 with the position), and refuses one under Basic Auth", async () => {
    const bad = await send(urls.oauth, "PUT", "/api/pipelines/typo", bearer("releaser"), {
      content: script,
      rbac_expression: '"release" in Group',
    })
    expect(bad.status).toBe(400)
    expect(bad.body).toEqual({ error: expect.stringMatching(/^rbac_expression: invalid expression at 1:\d+: .*Group/) })
    const syntax = await send(urls.oauth, "PUT", "/api/pipelines/typo", bearer("releaser"), {
      content: script,
      rbac_expression: 'Email == "a" &&',
    })
    expect(syntax.body).toEqual({ error: expect.stringMatching(/at 1:\d+/) })
    const underBasic = await send(urls.basic, "PUT", "/api/pipelines/plain", basic("admin", "s3cret-password"), {
      content: script,
      rbac_expression: rbac,
    })
    expect(underBasic.status).toBe(400)
    expect(underBasic.body).toEqual({ error: expect.stringContaining("Basic Auth") })
  })

  it("writes the request's user as every audit entry's actor, and the old and new expression", async () => {
    expect(audit).toContainEqual({
      event: "pipeline.upsert",
      pipeline: "guarded",
      pipeline_id: expect.any(String),
      actor: "github:releaser",
    })
    expect(audit).toContainEqual(
      expect.objectContaining({ event: "pipeline.rbac.update", actor: "github:releaser", old: null, new: rbac }),
    )
    expect(audit).toContainEqual(
      expect.objectContaining({ event: "pipeline.upsert", pipeline: "plain", actor: "basic:admin" }),
    )
    const widened = '"release" in Groups || "ops" in Groups'
    await send(urls.oauth, "PUT", "/api/pipelines/guarded", bearer("releaser"), {
      content: script,
      rbac_expression: widened,
    })
    expect(audit.at(-1)).toEqual(
      expect.objectContaining({ event: "pipeline.rbac.update", actor: "github:releaser", old: rbac, new: widened }),
    )
    await send(urls.oauth, "PUT", "/api/pipelines/guarded", bearer("releaser"), {
      content: script,
      rbac_expression: rbac,
    })
    const run = await send(urls.oauth, "GET", `/api/runs/${runId}`, bearer("releaser"))
    expect(run.body).toMatchObject({ triggered_by: "github:releaser" })
  })

  it("authenticates MCP the same way: Basic under Basic Auth, 401 without, and hides what REST hides", async () => {
    const toolsAs = async (base: string, authorization: string) => {
      const client = new Client({ name: "auth-test", version: "1.0.0" })
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
          requestInit: { headers: { Authorization: authorization } },
        }),
      )
      closers.push(() => client.close())
      return async (name: string, args: Record<string, unknown> = {}) => {
        const result = await client.callTool({ name, arguments: args })
        return { isError: result.isError === true, text: (result.content as { text: string }[])[0]?.text ?? "" }
      }
    }
    const asAdmin = await toolsAs(urls.basic, basic("admin", "s3cret-password"))
    expect((await asAdmin("list_pipelines")).text).toContain('"plain"')
    expect((await asAdmin("list_pipelines")).text).not.toContain('"guarded"')
    expect(await asAdmin("get_run", { run_id: runId })).toEqual({
      isError: true,
      text: expect.stringContaining("Basic Auth users"),
    })
    const asOutsider = new Client({ name: "auth-test", version: "1.0.0" })
    await expect(
      asOutsider.connect(
        new StreamableHTTPClientTransport(new URL(`${urls.oauth}/mcp`), {
          requestInit: { headers: { Authorization: bearer("outsider") } },
        }),
      ),
    ).rejects.toThrow(/403|--server-rbac/)
    const asStranger = await toolsAs(urls.oauth, bearer("stranger"))
    expect((await asStranger("search_pipelines", { query: "" })).text).not.toContain("guarded")
    expect((await asStranger("list_runs")).text).not.toContain(runId)
    const refused = new Client({ name: "auth-test", version: "1.0.0" })
    await expect(refused.connect(new StreamableHTTPClientTransport(new URL(`${urls.basic}/mcp`)))).rejects.toThrow(
      /401|authentication required/,
    )
    const unauthenticated = await fetch(`${urls.basic}/mcp`, { method: "POST", body: "{}" })
    expect(unauthenticated.status).toBe(401)
    expect(unauthenticated.headers.get("www-authenticate")).toBe('Basic realm="runnel", charset="UTF-8"')
  })

  it("lets the matching user through every route, and shows them the guarded pipeline in lists", async () => {
    // Deleting last: the other routes still need the pipeline.
    const ordered = routes()
      .filter(asksForUser)
      .sort((a, b) => Number(a.method === "DELETE") - Number(b.method === "DELETE"))
    for (const route of ordered) {
      const { path, body } = requestOn(route)
      const answer = await send(urls.oauth, route.method, path, bearer("releaser"), body)
      const what = `${route.method} ${route.path}: ${answer.text}`
      expect([401, 403, 500], what).not.toContain(answer.status)
      if (route.method === "GET" && ["/api/pipelines", "/api/runs", "/api/gates"].includes(route.path)) {
        expect(answer.text, what).toContain(route.path === "/api/pipelines" ? "guarded" : runId)
      }
    }
  })
})
