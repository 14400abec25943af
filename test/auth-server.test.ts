import { request } from "node:http"
import { afterAll, describe, expect, it } from "vitest"
import { issueToken } from "../apiserver/auth/session-token.ts"
import { testUser } from "../apiserver/auth/test-user.fixture.ts"
import { call, serverProcesses } from "./server-process.ts"

// `runnel server` with authentication on, as a user starts it: the refusals at start, the warnings, the
// drivers rule, the header limit node:http enforces before the app, and the slowing of password guessers.

const servers = serverProcesses("runnel-auth-server-")
afterAll(() => servers.cleanUp())

const sessionSecret = "a session secret of more than 32 characters"
const oauth = [
  "--oauth-github-client-id",
  "id",
  "--oauth-github-client-secret",
  "secret",
  "--oauth-callback-url",
  "http://127.0.0.1:1",
  "--oauth-session-secret",
  sessionSecret,
]
const basicAuth = ["--basic-auth-username", "admin", "--basic-auth-password", "s3cret-password"]
const asAdmin = `Basic ${Buffer.from("admin:s3cret-password").toString("base64")}`

/** A request with headers of any size (fetch refuses some): status, body. */
function rawGet(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/api/pipelines`, { headers }, (res) => {
      let body = ""
      res.setEncoding("utf8").on("data", (chunk: string) => {
        body += chunk
      })
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on("error", reject)
    req.end()
  })
}

describe("runnel server with authentication", () => {
  it("refuses to start with Basic Auth and OAuth both, naming both", async () => {
    await expect(servers.start([...basicAuth, ...oauth])).rejects.toThrow(
      /Basic Auth \(--basic-auth-username\) and OAuth \(--oauth-github-client-id\) are both configured/,
    )
  })

  it("refuses to start with a --server-rbac that does not compile, naming the flag and the position", async () => {
    await expect(
      servers.start([...basicAuth, "--driver", "docker", "--server-rbac", 'Email == "a" &&']),
    ).rejects.toThrow(/--server-rbac: invalid expression at 1:\d+/)
  })

  it("refuses --driver native with --allowed-drivers *, which leaves native out once authentication is on", async () => {
    await expect(servers.start([...basicAuth, "--allowed-drivers", "*"])).rejects.toThrow(
      /--driver native is not among --allowed-drivers docker/,
    )
  })

  it("serves OAuth with a short secret (warned), without native, and answers a 100 KB header with a JSON 431", async () => {
    const server = await servers.start([
      ...oauth.slice(0, -1),
      "short",
      "--driver",
      "docker",
      "--allowed-drivers",
      "*",
      "--host",
      "0.0.0.0",
    ])
    expect(server.stderr()).toMatch(/WARNING: --oauth-session-secret is 5 characters/)
    expect(server.stderr()).not.toMatch(/NO AUTHENTICATION/)
    const url = server.url.replace("0.0.0.0", "127.0.0.1")
    const token = await issueToken("short", testUser("a"))
    const drivers = await fetch(`${url}/api/drivers`, { headers: { Authorization: `Bearer ${token}` } })
    expect(await drivers.json()).toEqual({ drivers: ["docker", "kubernetes"] })
    const put = await fetch(`${url}/api/pipelines/local`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ content: "export const pipeline = async () => {}\n", driver: "native" }),
    })
    expect(put.status).toBe(400)
    expect(await put.json()).toEqual({
      error: 'driver "native" is not allowed on this server; allowed: docker, kubernetes',
    })
    const huge = await rawGet(url, { Authorization: `Bearer ${"a".repeat(100 * 1024)}` })
    expect(huge.status).toBe(431)
    expect(JSON.parse(huge.body)).toEqual({ error: expect.stringContaining("headers exceed 16 KiB") })
    expect(server.stderr()).not.toContain("a".repeat(100))
  })

  it("allows native when it is named, with a warning; slows a guesser after 10 failures with 429 and Retry-After, at /k8s too", async () => {
    // serverProcesses names native in --allowed-drivers.
    const server = await servers.start(basicAuth)
    expect(server.stderr()).toMatch(/WARNING: --allowed-drivers names native with authentication on/)
    expect((await call(server.url, "GET", "/api/drivers")).status).toBe(401)
    const drivers = await fetch(`${server.url}/api/drivers`, { headers: { Authorization: asAdmin } })
    expect(await drivers.json()).toEqual({ drivers: ["docker", "kubernetes", "native"] })
    const wrong = `Basic ${Buffer.from("admin:guess").toString("base64")}`
    for (let attempt = 1; attempt <= 9; attempt++) {
      expect((await rawGet(server.url, { Authorization: wrong })).status).toBe(401)
    }
    const tenth = await fetch(`${server.url}/api/pipelines`, { headers: { Authorization: wrong } })
    expect(tenth.status).toBe(401)
    expect(tenth.headers.get("www-authenticate")).toBe('Basic realm="runnel", charset="UTF-8"')
    const slowed = await fetch(`${server.url}/api/pipelines`, { headers: { Authorization: asAdmin } })
    expect(slowed.status).toBe(429)
    expect(Number(slowed.headers.get("retry-after"))).toBeGreaterThan(0)
    expect(await slowed.json()).toEqual({ error: expect.stringContaining("too many failed authentication attempts") })
    // The embedded Kubernetes API shares the count: the same address waits there too.
    const kubernetes = await fetch(`${server.url}/k8s/api`, { headers: { Authorization: asAdmin } })
    expect(kubernetes.status).toBe(429)
    expect(await kubernetes.json()).toMatchObject({
      kind: "Status",
      reason: "TooManyRequests",
      details: { retryAfterSeconds: expect.any(Number) },
    })
    // The probes and webhooks ask for no user, and are not slowed.
    expect((await fetch(`${server.url}/health`)).status).toBe(200)
    expect(server.stdout() + server.stderr()).not.toContain("guess")
    expect(server.stdout() + server.stderr()).not.toContain("s3cret-password")
  })
})
