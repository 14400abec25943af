import type { KubernetesObject } from "@kubernetes/client-node"
import { CustomObjectsApi, makeInformer, Watch } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { requestAfterClientLeft, startEmbeddedApi } from "./embedded-api.fixture.ts"

type Event = { type: string; object: KubernetesObject & { code?: number; reason?: string; message?: string } }

const pipelines = { group: "runnel.dev", version: "v1alpha1", namespace: "default", plural: "pipelines" }
const path = "/apis/runnel.dev/v1alpha1/namespaces/default/pipelines"
const body = (name: string, labels?: Record<string, string>) => ({
  apiVersion: "runnel.dev/v1alpha1",
  kind: "Pipeline",
  metadata: { name, labels },
  spec: { content: "x" },
})

let running: RunningApi
let objects: CustomObjectsApi

beforeAll(async () => {
  running = await startEmbeddedApi({ historyLimit: 25, bookmarkIntervalMs: 100 })
  objects = running.kubeConfig.makeApiClient(CustomObjectsApi)
})
afterAll(() => running.close())

/** Watches until `until` holds for the events seen (or the server ends the watch), then stops. */
async function watch(
  query: Record<string, string | number | boolean | undefined>,
  until: (events: Event[]) => boolean,
  during?: () => Promise<void>,
) {
  const events: Event[] = []
  const { promise: finished, resolve } = Promise.withResolvers<Error | null>()
  const controller = await new Watch(running.kubeConfig).watch(
    path,
    query,
    (type, object) => {
      events.push({ type, object })
      if (until(events)) resolve(null)
    },
    (error) => resolve(error),
  )
  await during?.()
  const timeout = setTimeout(
    () => resolve(new Error(`timed out with ${JSON.stringify(events.map((event) => event.type))}`)),
    5000,
  )
  const error = await finished
  clearTimeout(timeout)
  controller.abort()
  if (error !== null && error.name !== "AbortError") throw error
  return events
}

// Resuming, initial events and selectors are in ../kube-api-contract.fixture.ts; these are the parts a test can only drive here.
describe("watch", () => {
  it("sends bookmarks carrying the current resourceVersion when allowed", async () => {
    const events = await watch(
      { resourceVersion: String(running.api.resources.store.version), allowWatchBookmarks: true },
      (seen) => seen.some((event) => event.type === "BOOKMARK"),
    )
    const bookmark = events.find((event) => event.type === "BOOKMARK")
    expect(bookmark?.object).toMatchObject({ kind: "Pipeline", apiVersion: "runnel.dev/v1alpha1" })
    expect(Number(bookmark?.object.metadata?.resourceVersion)).toBe(running.api.resources.store.version)
  })

  it("ends a watch from a version older than the kept history with an ERROR event of 410 Expired", async () => {
    for (let index = 0; index < 30; index++) {
      await objects.createNamespacedCustomObject({ ...pipelines, body: body(`w-fill-${index}`) })
    }
    const events = await watch({ resourceVersion: "1" }, () => false)
    expect(events).toHaveLength(1)
    expect(events[0]?.type).toBe("ERROR")
    expect(events[0]?.object).toMatchObject({ kind: "Status", status: "Failure", reason: "Expired", code: 410 })
    expect(events[0]?.object.message).toMatch(/^too old resource version: 1 \(\d+\)$/)
  })

  it("answers 410 Expired to a list continuing from a compacted snapshot", async () => {
    const page = await objects.listNamespacedCustomObject({ ...pipelines, limit: 1 })
    for (let index = 0; index < 30; index++) {
      await objects.createNamespacedCustomObject({ ...pipelines, body: body(`w-more-${index}`) })
    }
    const response = await fetch(`${running.server}${path}?limit=1&continue=${page.metadata.continue}`)
    expect(response.status).toBe(410)
    expect(await response.json()).toMatchObject({ reason: "Expired", code: 410 })
  })

  it("writes nothing to a watch whose client left before it was served (while it was authenticated, say)", async () => {
    const late = await requestAfterClientLeft(running.api, `${path}?watch=true`)
    await objects.createNamespacedCustomObject({ ...pipelines, body: body("after-the-client-left") })
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(late.written()).toBe(0)
  })

  it("ends after timeoutSeconds", async () => {
    const started = Date.now()
    const events = await watch(
      { resourceVersion: String(running.api.resources.store.version), timeoutSeconds: 1 },
      () => false,
    )
    expect(events).toEqual([])
    expect(Date.now() - started).toBeGreaterThanOrEqual(900)
  })

  it("feeds client-node's informer, which lists then watches", async () => {
    const informer = makeInformer(
      running.kubeConfig,
      path,
      () => objects.listNamespacedCustomObject({ ...pipelines, labelSelector: "informed=yes" }),
      "informed=yes",
    )
    const added: string[] = []
    const deleted: string[] = []
    const { promise: done, resolve } = Promise.withResolvers<void>()
    informer.on("add", (object) => added.push(object.metadata?.name ?? ""))
    informer.on("delete", (object) => {
      deleted.push(object.metadata?.name ?? "")
      resolve()
    })
    await objects.createNamespacedCustomObject({ ...pipelines, body: body("inf-1", { informed: "yes" }) })
    await informer.start()
    await objects.createNamespacedCustomObject({ ...pipelines, body: body("inf-2", { informed: "yes" }) })
    await objects.deleteNamespacedCustomObject({ ...pipelines, name: "inf-1" })
    await done
    await informer.stop()
    expect(added).toEqual(["inf-1", "inf-2"])
    expect(deleted).toEqual(["inf-1"])
  })
})
