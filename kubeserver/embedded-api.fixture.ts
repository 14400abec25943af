import { once } from "node:events"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { type AddressInfo, connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { KubeConfig } from "@kubernetes/client-node"
import type { EmbeddedApi, EmbeddedApiOptions } from "./embedded-api.ts"
import { createEmbeddedApi } from "./embedded-api.ts"
import { loadCrds, podType } from "./resource-types.ts"

/** The CRDs the tests use, a stand-in for crds/ with the shapes the tests rely on. */
export const testCrds = loadCrds(join(import.meta.dirname, "testdata"))

export type RunningApi = {
  api: EmbeddedApi
  /** `http://127.0.0.1:PORT/k8s` */
  server: string
  kubeConfig: KubeConfig
  dir: string
  close(): Promise<void>
}

/** The embedded API on a real HTTP server on 127.0.0.1, a fresh SQLite file, and a KubeConfig pointing at it. */
export async function startEmbeddedApi(options: Partial<EmbeddedApiOptions> = {}): Promise<RunningApi> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-kube-"))
  const api = createEmbeddedApi({ db: join(dir, "kube.db"), crds: testCrds, ...options })
  const http = createServer((req, res) => {
    if (!api.handle(req, res)) {
      res.writeHead(404)
      res.end()
    }
  })
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
  const server = `http://127.0.0.1:${(http.address() as AddressInfo).port}${api.prefix}`
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromOptions({
    clusters: [{ name: "embedded", server, skipTLSVerify: true }],
    users: [{ name: "tester" }],
    contexts: [{ name: "embedded", cluster: "embedded", user: "tester", namespace: "default" }],
    currentContext: "embedded",
  })
  return {
    api,
    server,
    kubeConfig,
    dir,
    async close() {
      // Pods a test left are deleted at once, so that no container outlives the test.
      for (const pod of api.resources.list(podType, undefined).items) {
        api.resources.delete(podType, pod.metadata.namespace, pod.metadata.name ?? "", { gracePeriodSeconds: 0 })
      }
      await api.settled() // deleted Pods' containers removed from Docker
      api.close()
      http.closeAllConnections()
      await new Promise<void>((resolve) => http.close(() => resolve()))
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/**
 * GET `path` (below the API's prefix) handed to the API only once its client has left, as a request
 * is when the client goes while it is authenticated or looked up: resolves, once it is handed over,
 * with a count of what the API writes to that response from then on.
 */
export async function requestAfterClientLeft(api: EmbeddedApi, path: string): Promise<{ written(): number }> {
  let written = 0
  const handed = Promise.withResolvers<void>()
  const late = createServer((req, res) =>
    res.once("close", () => {
      const write = res.write.bind(res) as (chunk: string | Buffer) => boolean
      res.write = ((chunk: string | Buffer) => {
        written++
        return write(chunk)
      }) as typeof res.write
      api.handle(req, res)
      handed.resolve()
    }),
  )
  late.listen(0, "127.0.0.1")
  await once(late, "listening")
  try {
    const socket = connect((late.address() as AddressInfo).port, "127.0.0.1")
    socket.write(`GET ${api.prefix}${path} HTTP/1.1\r\nHost: x\r\n\r\n`)
    await new Promise((resolve) => setTimeout(resolve, 50))
    socket.destroy()
    await handed.promise
  } finally {
    late.close()
  }
  return { written: () => written }
}
