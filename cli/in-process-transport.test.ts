import { mkdtempSync, rmSync } from "node:fs"
import type { AddressInfo } from "node:net"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { CustomObjectsApi } from "@kubernetes/client-node"
import { describe, expect, it, onTestFinished } from "vitest"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
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
})
