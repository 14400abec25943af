// The operator's costs: how long a Run of a no-op script takes from its creation to `success`, at
// concurrency 1 and 8, against the engine alone; and how many watch events per second the embedded API
// delivers to 50 watchers. Everything in this process, as `runnel server` runs it: the operator reaches the
// embedded API through the in-process transport, the 50 watchers over loopback HTTP.
// Run alone with `node bench/operator.ts`, or through bench/main.ts with runOperatorBench(line).
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { CustomObjectsApi, KubeConfig, Watch } from "@kubernetes/client-node"
import { inProcessTransport } from "../cli/in-process-transport.ts"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { type RunObject, resourcePath, runnelApiVersion, runnelGroup, runnelVersion } from "../lib/kube/resources.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { staticSecrets } from "../lib/secrets/secret-resolver.ts"
import { runSecrets } from "../lib/secrets/secret-store.ts"
import { openSqliteSecretStore } from "../lib/secrets/sqlite-secret-store.ts"
import type { Driver } from "../operator/drivers/driver.ts"
import { runScript } from "../operator/engine/engine.ts"
import { startOperator } from "../operator/operator.ts"
import { median } from "./median.ts"
import { quietObserver } from "./quiet-observer.ts"

export type BenchLine = (name: string, runnel: string, floor: string, ratio: string, target: string) => void

const noop = "export const pipeline = async () => {}\n"
const limits = { memoryMb: 64, timeoutMs: 60_000 }
const group = { group: runnelGroup, version: runnelVersion, namespace: "default" }

/** A no-op script never calls runtime.run, so no driver is reached. */
const noDriver: Driver = {
  name: "none",
  open: () => Promise.reject(new Error("the bench pipeline runs no task")),
  removeLeftovers: async () => {},
  close: async () => {},
}

export async function runOperatorBench(line: BenchLine): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-operator-"))
  const api = createEmbeddedApi({ db: join(dir, "runnel.db"), crds: loadCrds(join(import.meta.dirname, "..", "crds")) })
  const http = createServer((req, res) => {
    if (!api.handle(req, res)) res.writeHead(404).end()
  })
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
  const server = `http://127.0.0.1:${(http.address() as AddressInfo).port}${api.prefix}`
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromOptions({
    clusters: [{ name: "bench", server, skipTLSVerify: true }],
    users: [{ name: "bench" }],
    contexts: [{ name: "bench", cluster: "bench", user: "bench", namespace: "default" }],
    currentContext: "bench",
  })
  inProcessTransport(kubeConfig, "bench", api.handle)
  const store = await openSqliteLogStore(join(dir, "runnel-logs.db"))
  const operator = await startOperator({
    kubeConfig,
    namespace: "default",
    store,
    secrets: runSecrets(await openSqliteSecretStore({ path: ":memory:" }), true),
    drivers: () => noDriver,
    defaultDriver: "none",
    allowedDrivers: "*",
    maxInFlight: 16,
    limits,
  })
  try {
    const objects = kubeConfig.makeApiClient(CustomObjectsApi)
    await objects.createNamespacedCustomObject({
      ...group,
      plural: "pipelines",
      body: {
        apiVersion: runnelApiVersion,
        kind: "Pipeline",
        metadata: { name: "noop" },
        spec: { content: noop },
      },
    })
    await runLatency(line, kubeConfig, objects, store)
    await watchFanOut(line, server, api)
  } finally {
    await operator.stop(0)
    http.closeAllConnections()
    await new Promise<void>((resolve) => http.close(() => resolve()))
    api.close()
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

async function runLatency(
  line: BenchLine,
  kubeConfig: KubeConfig,
  objects: CustomObjectsApi,
  store: Awaited<ReturnType<typeof openSqliteLogStore>>,
): Promise<void> {
  // One watch, as a client waiting for its runs would hold: each run's latency ends when its success arrives.
  const waiting = new Map<string, (at: number) => void>()
  const watch = await new Watch(kubeConfig).watch(
    resourcePath("default", "runs"),
    {},
    (_type, run: RunObject) => {
      if (run.status?.phase === undefined || !["success", "failure", "error", "aborted"].includes(run.status.phase)) {
        return
      }
      if (run.status.phase !== "success") throw new Error(`bench run ${run.metadata?.name} ended ${run.status.phase}`)
      waiting.get(run.metadata?.name ?? "")?.(performance.now())
    },
    () => {},
  )
  let runs = 0
  const oneRun = async (): Promise<number> => {
    const name = `bench-${++runs}`
    const { promise, resolve } = Promise.withResolvers<number>()
    waiting.set(name, resolve)
    const createdAt = performance.now()
    await objects.createNamespacedCustomObject({
      ...group,
      plural: "runs",
      body: {
        apiVersion: runnelApiVersion,
        kind: "Run",
        metadata: { name },
        spec: { pipelineRef: { name: "noop" } },
      },
    })
    const finishedAt = await promise
    waiting.delete(name)
    return finishedAt - createdAt
  }
  const engineRun = async () => {
    const startedAt = performance.now()
    await runScript(
      {
        runId: `bench-engine-${++runs}`,
        pipelineId: "bench",
        pipelineName: "noop",
        filename: "noop.ts",
        source: noop,
        triggeredBy: "manual",
        args: [],
      },
      { driver: noDriver, driverName: "none", store, secrets: staticSecrets({}), observer: quietObserver, limits },
      new AbortController().signal,
    )
    return performance.now() - startedAt
  }
  try {
    for (let n = 0; n < 5; n++) {
      await oneRun()
      await engineRun()
    }
    const serial: number[] = []
    const engine: number[] = []
    for (let n = 0; n < 40; n++) {
      serial.push(await oneRun())
      engine.push(await engineRun())
    }
    const parallel: number[] = []
    const engineParallel: number[] = []
    for (let round = 0; round < 8; round++) {
      parallel.push(...(await Promise.all(Array.from({ length: 8 }, oneRun))))
      engineParallel.push(...(await Promise.all(Array.from({ length: 8 }, engineRun))))
    }
    const one = median(serial)
    const floor = median(engine)
    line(
      "run latency c=1",
      `${one.toFixed(1)} ms median`,
      `${floor.toFixed(1)} ms engine`,
      `+${(one - floor).toFixed(1)} ms`,
      "< 20 ms of runnel overhead (create to success, minus the engine alone)",
    )
    const eight = median(parallel)
    const eightFloor = median(engineParallel)
    line(
      "run latency c=8",
      `${eight.toFixed(1)} ms median`,
      `${eightFloor.toFixed(1)} ms engine`,
      `+${(eight - eightFloor).toFixed(1)} ms`,
      "< 20 ms of runnel overhead (8 runs created at once; floor: 8 engine runs at once)",
    )
  } finally {
    watch.abort()
  }
}

async function watchFanOut(line: BenchLine, server: string, api: ReturnType<typeof createEmbeddedApi>) {
  const watchers = 50
  const events = 2_000
  const type = api.resources.types.byPath(runnelApiVersion, "pipelines")
  if (type === undefined) throw new Error("the pipelines resource is not served")
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromOptions({
    clusters: [{ name: "bench", server, skipTLSVerify: true }],
    users: [{ name: "bench" }],
    contexts: [{ name: "bench", cluster: "bench", user: "bench" }],
    currentContext: "bench",
  })
  const from = String(api.resources.store.version)
  let delivered = 0
  const { promise: allDelivered, resolve } = Promise.withResolvers<number>()
  const controllers = await Promise.all(
    Array.from({ length: watchers }, () =>
      new Watch(kubeConfig).watch(
        resourcePath("default", "pipelines"),
        { resourceVersion: from },
        (eventType) => {
          if (eventType !== "ADDED") return
          if (++delivered === watchers * events) resolve(performance.now())
        },
        () => {},
      ),
    ),
  )
  try {
    const startedAt = performance.now()
    // Written in process, in batches that let the event loop stream between them, so the figure is the fan-out's.
    for (let n = 0; n < events; n += 50) {
      for (let k = n; k < n + 50; k++) {
        api.resources.create(type, "default", {
          apiVersion: runnelApiVersion,
          kind: "Pipeline",
          metadata: { name: `fan-${k}` },
          spec: { content: noop },
        })
      }
      await new Promise((next) => setImmediate(next))
    }
    const endedAt = await allDelivered
    const perSecond = (watchers * events) / ((endedAt - startedAt) / 1000)
    line(
      "watch fan-out",
      `${Math.round(perSecond).toLocaleString("en")} events/s`,
      "-",
      "-",
      `${watchers} watchers × ${events} writes, delivered and parsed by client-node in this process`,
    )
  } finally {
    for (const controller of controllers) controller.abort()
  }
}
