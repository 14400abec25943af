import { ApiException, CoreV1Api, CustomObjectsApi, KubeConfig, Watch } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { startEmbeddedApi } from "./embedded-api.fixture.ts"
import { forbidden } from "./kube-status.ts"

const author = "example.com/changed-by"
let running: RunningApi

beforeAll(async () => {
  running = await startEmbeddedApi({
    authorAnnotation: author,
    authenticate: (req) => {
      if (req.headers.authorization === "Bearer t0ken") return true
      if (req.headers.authorization === "Bearer alice") return "github:alice"
      if (req.headers.authorization === "Bearer bob") throw forbidden("bob may not use this API")
      return false
    },
  })
})
afterAll(() => running.close())

function config(token?: string) {
  const config = new KubeConfig()
  config.loadFromOptions({
    clusters: [{ name: "embedded", server: running.server, skipTLSVerify: true }],
    users: [{ name: "user", token }],
    contexts: [{ name: "embedded", cluster: "embedded", user: "user", namespace: "default" }],
    currentContext: "embedded",
  })
  return config
}
const client = (token?: string) => config(token).makeApiClient(CoreV1Api)
const objects = (token: string) => config(token).makeApiClient(CustomObjectsApi)
const pipelines = { group: "runnel.dev", version: "v1alpha1", namespace: "default", plural: "pipelines" }

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

  it("answers the Status the hook throws, such as 403 Forbidden with its message", async () => {
    const response = await fetch(`${running.server}/api`, { headers: { Authorization: "Bearer bob" } })
    expect(response.status).toBe(403)
    expect(await response.json()).toMatchObject({
      kind: "Status",
      status: "Failure",
      reason: "Forbidden",
      message: "bob may not use this API",
      code: 403,
    })
  })

  it("serves a request with the bearer token the hook accepts", async () => {
    expect((await client("t0ken").readNamespace({ name: "default" })).metadata?.name).toBe("default")
  })
})

describe("the author annotation", () => {
  const annotationOf = (object: unknown) =>
    (object as { metadata?: { annotations?: Record<string, string> } }).metadata?.annotations?.[author]

  it("names the user the hook gave on a create, replaces a client's own value, and goes on a write without a user", async () => {
    const created = await objects("alice").createNamespacedCustomObject({
      ...pipelines,
      body: {
        apiVersion: "runnel.dev/v1alpha1",
        kind: "Pipeline",
        metadata: { name: "authored", annotations: { [author]: "github:someone-else", keep: "me" } },
        spec: { content: "x" },
      },
    })
    expect(annotationOf(created)).toBe("github:alice")
    expect((created as { metadata: { annotations: Record<string, string> } }).metadata.annotations.keep).toBe("me")

    const patched = await fetch(`${running.server}/apis/runnel.dev/v1alpha1/namespaces/default/pipelines/authored`, {
      method: "PATCH",
      headers: { Authorization: "Bearer t0ken", "Content-Type": "application/merge-patch+json" },
      body: JSON.stringify({ metadata: { annotations: { [author]: "github:forged" } }, spec: { content: "y" } }),
    })
    expect(patched.status).toBe(200)
    expect(annotationOf(await patched.json())).toBeUndefined()
  })

  it("names the user who deleted an object on the state its watchers see deleted", async () => {
    const seen: unknown[] = []
    const watch = await new Watch(config("t0ken")).watch(
      "/apis/runnel.dev/v1alpha1/namespaces/default/pipelines",
      {},
      (type, object) => {
        if (type === "DELETED") seen.push(object)
      },
      () => {},
    )
    try {
      await objects("alice").deleteNamespacedCustomObject({ ...pipelines, name: "authored" })
      for (let waited = 0; seen.length === 0 && waited < 5000; waited += 20) {
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      expect(seen.map(annotationOf)).toEqual(["github:alice"])
    } finally {
      watch.abort()
    }
  })
})
