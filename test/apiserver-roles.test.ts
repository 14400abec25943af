import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { CustomObjectsApi } from "@kubernetes/client-node"
import { afterAll, describe, expect, it } from "vitest"
import { startEmbeddedApi } from "../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { root, runnel } from "./cli.ts"
import { call, eventually, script, serverProcesses } from "./server-process.ts"

const servers = serverProcesses("runnel-apiserver-roles-test-")
afterAll(() => servers.cleanUp())

describe("GET /api/runs/:id/gates", () => {
  it("is refused with 403 naming the feature when gates is off", async () => {
    const server = await servers.start()
    const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
    const answer = await api("GET", "/api/runs/run-none/gates")
    expect(answer.status).toBe(403)
    expect(answer.body.error).toMatch(/"gates" feature is not enabled/)
    server.child.kill("SIGTERM")
  })

  it("lists no gates of an existing run and answers 404 for an unknown one when gates is on", async () => {
    const server = await servers.start(["--allowed-features", "*,gates"])
    const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
    expect((await api("PUT", "/api/pipelines/gated", { content: script("true") })).status).toBe(201)
    const id = (await api("POST", "/api/pipelines/gated/trigger")).body.run_id
    const gates = await api("GET", `/api/runs/${id}/gates`)
    expect(gates.status).toBe(200)
    expect(gates.body).toEqual([])
    const unknown = await api("GET", "/api/runs/run-unknown/gates")
    expect(unknown.status).toBe(404)
    expect(unknown.body.error).toMatch(/run-unknown/)
    server.child.kill("SIGTERM")
  })
})

describe("runnel server shutting down", () => {
  it("answers 503 to new work while its runs finish, and still serves reads", async () => {
    const server = await servers.start(["--shutdown-grace", "30s"])
    const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
    expect((await api("PUT", "/api/pipelines/long", { content: script("sleep 3") })).status).toBe(201)
    const id = (await api("POST", "/api/pipelines/long/trigger")).body.run_id
    await eventually(
      () => api("GET", `/api/runs/${id}`),
      (answer) => answer.body.status === "running",
      "the run is running",
    )
    server.child.kill("SIGTERM")
    await eventually(
      () => fetch(`${server.url}/health`).then((response) => response.status),
      (status) => status === 503,
      "/health says it is shutting down",
    )
    for (const [method, path, body] of [
      ["POST", "/api/pipelines/long/trigger", undefined],
      ["POST", "/api/pipelines/long/run", undefined],
      ["PUT", "/api/pipelines/other", { content: script("true") }],
      ["POST", "/api/pipelines", { name: "another", content: script("true") }],
    ] as const) {
      const answer = await api(method, path, body)
      expect(answer.status, `${method} ${path}`).toBe(503)
      expect(answer.body.error).toMatch(/shutting down/)
    }
    expect((await api("GET", "/api/pipelines")).status).toBe(200)
    const exit = await new Promise<number | null>((resolve) => server.child.on("exit", resolve))
    expect(exit).toBe(0)
  }, 60_000)
})

describe("open access on a non-loopback --host", () => {
  it("is warned about on one stderr line, and not on loopback", async () => {
    const open = await servers.start(["--host", "0.0.0.0"])
    const line = await eventually(
      async () => open.stderr(),
      (stderr) => stderr.includes("WARNING"),
      "the warning is printed",
      5_000,
    )
    expect(line.split("\n").filter((text) => text.includes("WARNING"))).toEqual([
      expect.stringMatching(/^runnel: WARNING: serving on --host 0\.0\.0\.0 with NO AUTHENTICATION/),
    ])
    open.child.kill("SIGTERM")
    const loopback = await servers.start()
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(loopback.stderr()).not.toMatch(/WARNING/)
    loopback.child.kill("SIGTERM")
  })
})

describe("runnel apiserver", () => {
  it("serves the API against the Kubernetes API of --kubeconfig: triggers create Run resources", async () => {
    const kube = await startEmbeddedApi({ crds: loadCrds(join(root, "crds")) })
    try {
      const kubeconfig = join(kube.dir, "kubeconfig")
      writeFileSync(kubeconfig, kube.kubeConfig.exportConfig())
      const server = await servers.start(["--kubeconfig", kubeconfig], ["apiserver"])
      const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
      expect(await (await fetch(`${server.url}/health`)).json()).toEqual({ status: "ok" })
      expect((await api("PUT", "/api/pipelines/remote", { content: script("true") })).status).toBe(201)
      const listed = await api("GET", "/api/pipelines")
      expect(listed.status).toBe(200)
      expect(listed.body.items.map((pipeline: { name: string }) => pipeline.name)).toEqual(["remote"])
      const triggered = await api("POST", "/api/pipelines/remote/trigger")
      expect(triggered.status).toBe(202)
      const run = (await kube.kubeConfig.makeApiClient(CustomObjectsApi).getNamespacedCustomObject({
        group: "runnel.dev",
        version: "v1alpha1",
        namespace: "default",
        plural: "runs",
        name: triggered.body.run_id,
      })) as { spec: { pipelineRef: { name: string } } }
      expect(run.spec.pipelineRef.name).toBe("remote")
      // No operator here: the run waits in the queue.
      expect((await api("GET", `/api/runs/${triggered.body.run_id}`)).body.status).toBe("queued")
      server.child.kill("SIGTERM")
    } finally {
      await kube.close()
    }
  })

  it("without --kubeconfig outside a cluster, says to pass one", async () => {
    // Not in a Pod, and nothing kubectl would find either: no $KUBECONFIG, a home without ~/.kube/config.
    // (runnel() lays these over the test's own environment; empty counts as unset.)
    const env = { KUBERNETES_SERVICE_HOST: "", KUBECONFIG: "", HOME: servers.dir }
    const result = await runnel(["apiserver", "--port", "0"], { env, cwd: servers.dir })
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(/pass --kubeconfig/)
  })
})
