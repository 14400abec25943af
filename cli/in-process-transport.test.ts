import { mkdtempSync, rmSync } from "node:fs"
import type { AddressInfo } from "node:net"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { setTimeout as sleep } from "node:timers/promises"
import { CustomObjectsApi, Watch } from "@kubernetes/client-node"
import { describe, expect, it, onTestFinished } from "vitest"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import type { ApiResponse } from "../kubeserver/http-exchange.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { kubeApiContract, refusal } from "../lib/kube/kube-api-contract.fixture.ts"
import { inProcessTransport } from "./in-process-transport.ts"
import { loadKubeConfig } from "./kubeconfig.ts"

const runnelCrds = loadCrds(join(import.meta.dirname, "..", "crds"))
const token = "in-process-test-token"

/** A port of 127.0.0.1 that nothing listens on: one the system handed out, closed again. */
async function closedPort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/**
 * The embedded API as `runnel server`'s roles reach it: its handler behind the in-process transport, with a
 * kubeconfig whose URL nothing listens on, so that every request that succeeds went through the pipe, and an
 * authenticate hook that lets in only the process token; the client sends `sent`.
 */
async function inProcessApi(sent = token) {
  const dir = mkdtempSync(join(tmpdir(), "runnel-in-process-"))
  const api = createEmbeddedApi({
    db: join(dir, "kube.db"),
    crds: runnelCrds,
    authenticate: (req) => req.headers.authorization === `Bearer ${token}`,
  })
  const server = `http://127.0.0.1:${await closedPort()}${api.prefix}`
  const kubeConfig = loadKubeConfig({ kind: "embedded" }, { server, token: sent })
  inProcessTransport(kubeConfig, sent, api.handle)
  return {
    kubeConfig,
    settled: () => api.settled(),
    async close() {
      api.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

kubeApiContract("the embedded (in-process transport)", () => inProcessApi())

describe("the in-process transport", () => {
  it("sends the process token: with another one the embedded API answers 401", async () => {
    const running = await inProcessApi("wrong")
    onTestFinished(() => running.close())
    const list = running.kubeConfig
      .makeApiClient(CustomObjectsApi)
      .listNamespacedCustomObject({ group: "runnel.dev", version: "v1alpha1", namespace: "default", plural: "runs" })
    expect((await refusal(list)).code).toBe(401)
  })

  it("closes the server's side of an aborted watch, so that the API stops writing to it", async () => {
    const kubeConfig = loadKubeConfig(
      { kind: "embedded" },
      { server: `http://127.0.0.1:${await closedPort()}/k8s`, token },
    )
    let response: ApiResponse | undefined
    const closed = new Promise<void>((resolve) => {
      inProcessTransport(kubeConfig, token, (_req, res) => {
        response = res
        res.writeHead(200, { "Content-Type": "application/json" })
        res.write(`${JSON.stringify({ type: "ADDED", object: { metadata: { name: "a" } } })}\n`)
        res.on("close", () => resolve())
        return true
      })
    })
    const seen: string[] = []
    const first = new Promise<void>((resolve) => {
      void new Watch(kubeConfig)
        .watch(
          "/apis/runnel.dev/v1alpha1/namespaces/default/runs",
          {},
          (type: string) => {
            seen.push(type)
            resolve()
          },
          () => {},
        )
        .then((controller) => first.then(() => controller.abort()))
    })
    await first
    // Before the fix the response never closed: the API would have written to the watch for good.
    const outcome = await Promise.race([closed.then(() => "closed"), sleep(5_000).then(() => "still open after 5 s")])
    expect(seen).toEqual(["ADDED"])
    expect(outcome).toBe("closed")
    expect(response?.closed).toBe(true)
  })
})
