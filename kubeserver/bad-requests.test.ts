import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { startEmbeddedApi } from "./embedded-api.fixture.ts"

let running: RunningApi

beforeAll(async () => {
  running = await startEmbeddedApi({ maxBodyBytes: 64 * 1024 })
})
afterAll(() => running.close())

const pipelines = "/apis/runnel.dev/v1alpha1/namespaces/default/pipelines"

async function call(path: string, init: RequestInit & { contentType?: string } = {}) {
  const response = await fetch(`${running.server}${path}`, {
    ...init,
    headers: { "Content-Type": init.contentType ?? "application/json", ...init.headers },
  })
  const text = await response.text()
  return { code: response.status, body: text.startsWith("{") ? JSON.parse(text) : text, headers: response.headers }
}

describe("bad requests", () => {
  it("answers malformed JSON with 400 BadRequest", async () => {
    const { code, body } = await call(pipelines, { method: "POST", body: "{not json" })
    expect(code).toBe(400)
    expect(body).toMatchObject({ kind: "Status", apiVersion: "v1", status: "Failure", reason: "BadRequest", code: 400 })
    expect(body.message).toMatch(/^couldn't get version\/kind; json parse error: /)
  })

  it("answers a body that is not an object, or of another kind, with 400", async () => {
    expect((await call(pipelines, { method: "POST", body: "[1, 2]" })).code).toBe(400)
    const other = await call(pipelines, {
      method: "POST",
      body: JSON.stringify({ apiVersion: "v1", kind: "Secret", metadata: { name: "x" } }),
    })
    expect(other.code).toBe(400)
    expect(other.body.message).toBe(
      "the API version in the data (v1) does not match the expected API version (runnel.dev/v1alpha1)",
    )
  })

  it("accepts YAML bodies and refuses malformed ones", async () => {
    const yaml = "apiVersion: runnel.dev/v1alpha1\nkind: Pipeline\nmetadata:\n  name: from-yaml\nspec:\n  content: x\n"
    expect((await call(pipelines, { method: "POST", body: yaml, contentType: "application/yaml" })).code).toBe(201)
    const broken = await call(pipelines, { method: "POST", body: "a: [", contentType: "application/yaml" })
    expect(broken.code).toBe(400)
  })

  it("answers wrong types in metadata with 400", async () => {
    const { code } = await call(pipelines, {
      method: "POST",
      body: JSON.stringify({ metadata: { name: "x", labels: { a: 1 } }, spec: { content: "x" } }),
    })
    expect(code).toBe(400)
  })

  it("answers unknown paths and resources with 404 and a Status", async () => {
    for (const path of [
      "/apis/runnel.dev/v1alpha1/namespaces/default/widgets",
      "/apis/example.com/v1",
      "/nothing",
      "/api/v2",
    ]) {
      const { code, body } = await call(path)
      expect(code, path).toBe(404)
      expect(body, path).toMatchObject({
        kind: "Status",
        reason: "NotFound",
        message: "the server could not find the requested resource",
      })
    }
  })

  it("answers a method the resource does not take with 405", async () => {
    expect((await call(`${pipelines}/x/status`, { method: "DELETE" })).code).toBe(405)
    expect((await call("/apis/runnel.dev/v1alpha1/pipelines", { method: "POST", body: "{}" })).code).toBe(405)
  })

  it("refuses server-side apply with 415", async () => {
    await call(pipelines, {
      method: "POST",
      body: JSON.stringify({ metadata: { name: "ssa" }, spec: { content: "x" } }),
    })
    const { code, body } = await call(`${pipelines}/ssa?fieldManager=me`, {
      method: "PATCH",
      body: "spec:\n  paused: true\n",
      contentType: "application/apply-patch+yaml",
    })
    expect(code).toBe(415)
    expect(body.reason).toBe("UnsupportedMediaType")
  })

  it("refuses a body over the size limit with 413", async () => {
    const { code, body } = await call(pipelines, {
      method: "POST",
      body: JSON.stringify({ metadata: { name: "big" }, spec: { content: "x".repeat(100 * 1024) } }),
    })
    expect(code).toBe(413)
    expect(body.reason).toBe("RequestEntityTooLarge")
  })

  it("answers a watch from a version that is not a number with 400", async () => {
    expect((await call(`${pipelines}?watch=true&resourceVersion=abc`)).code).toBe(400)
  })

  it("answers unknown fieldValidation and label selector syntax with 400", async () => {
    expect((await call(`${pipelines}?fieldValidation=Loose`, { method: "POST", body: "{}" })).code).toBe(400)
    expect((await call(`${pipelines}?labelSelector=${encodeURIComponent("a in (")}`)).code).toBe(400)
  })

  it("warns about pruned unknown fields when validation is not Strict", async () => {
    const { code, headers } = await call(pipelines, {
      method: "POST",
      body: JSON.stringify({ metadata: { name: "warned" }, spec: { content: "x", colour: "red" } }),
    })
    expect(code).toBe(201)
    expect(headers.get("warning")).toBe('299 - "unknown field \\"spec.colour\\""')
  })

  it("keeps serving after all of the above", async () => {
    const { code, body } = await call("/version")
    expect(code).toBe(200)
    expect(body.major).toBe("1")
    expect((await call(pipelines)).code).toBe(200)
  })
})
