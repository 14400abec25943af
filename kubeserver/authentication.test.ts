import { ApiException, CoreV1Api, KubeConfig } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { startEmbeddedApi } from "./embedded-api.fixture.ts"

let running: RunningApi

beforeAll(async () => {
  running = await startEmbeddedApi({ authenticate: (req) => req.headers.authorization === "Bearer t0ken" })
})
afterAll(() => running.close())

function client(token?: string) {
  const config = new KubeConfig()
  config.loadFromOptions({
    clusters: [{ name: "embedded", server: running.server, skipTLSVerify: true }],
    users: [{ name: "user", token }],
    contexts: [{ name: "embedded", cluster: "embedded", user: "user" }],
    currentContext: "embedded",
  })
  return config.makeApiClient(CoreV1Api)
}

describe("authentication", () => {
  it("answers 401 Unauthorized, as a Status, to a request the authenticate hook refuses", async () => {
    const error = await client("wrong")
      .readNamespace({ name: "default" })
      .catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(ApiException)
    expect((error as ApiException<string>).code).toBe(401)
    const response = await fetch(`${running.server}/api`)
    expect(response.status).toBe(401)
    expect(await response.json()).toMatchObject({ kind: "Status", reason: "Unauthorized", code: 401 })
  })

  it("serves a request with the bearer token the hook accepts", async () => {
    expect((await client("t0ken").readNamespace({ name: "default" })).metadata?.name).toBe("default")
  })
})
