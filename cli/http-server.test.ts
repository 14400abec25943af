import type { AddressInfo } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { type HttpFront, httpFront } from "./http-server.ts"

// The front's phases one by one, on real HTTP over loopback: in a whole `runnel server` the starting
// phase lasts a few milliseconds, too short to meet every path in it (test/server-ready.test.ts).
let front: HttpFront | undefined
afterEach(async () => {
  await front?.close()
  front = undefined
})

async function started(): Promise<{
  front: HttpFront
  get: (path: string) => Promise<[number, unknown, string | null]>
}> {
  const serving = httpFront()
  front = serving
  await new Promise<void>((resolve) => serving.http.listen(0, "127.0.0.1", resolve))
  const { port } = serving.http.address() as AddressInfo
  const get = async (path: string): Promise<[number, unknown, string | null]> => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`)
    return [response.status, await response.json(), response.headers.get("retry-after")]
  }
  return { front: serving, get }
}

describe("the HTTP front", () => {
  it("answers the API 503 with Retry-After while starting, says starting on /readyz and /health, live on /livez", async () => {
    const { get } = await started()
    const [status, body, retryAfter] = await get("/api/pipelines")
    expect(status).toBe(503)
    expect((body as { error: string }).error).toMatch(/^the server is starting and takes no requests yet/)
    expect(retryAfter).toBe("1")
    expect((await get("/mcp"))[0]).toBe(503)
    expect(await get("/readyz")).toEqual([503, { status: "starting" }, null])
    expect(await get("/health")).toEqual([503, { status: "starting" }, null])
    expect((await get("/livez"))[0]).toBe(200)
    expect((await get("/nowhere"))[0]).toBe(404)
  })

  it("hands /api to the API once ready, and says ok on every probe", async () => {
    const { front: serving, get } = await started()
    serving.ready((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end('{"from":"api"}')
    })
    expect((await get("/api/pipelines")).slice(0, 2)).toEqual([200, { from: "api" }])
    for (const probe of ["/readyz", "/health", "/livez"])
      expect((await get(probe)).slice(0, 2)).toEqual([200, { status: "ok" }])
  })

  it("says shutting down on /readyz and /health while draining, and keeps the API and /livez", async () => {
    const { front: serving, get } = await started()
    serving.ready((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end('{"from":"api"}')
    })
    serving.drain()
    expect((await get("/readyz")).slice(0, 2)).toEqual([503, { status: "shutting down" }])
    expect((await get("/health")).slice(0, 2)).toEqual([503, { status: "shutting down" }])
    expect((await get("/livez"))[0]).toBe(200)
    expect((await get("/api/runs")).slice(0, 2)).toEqual([200, { from: "api" }])
  })
})
