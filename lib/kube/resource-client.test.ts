import { resolve } from "node:path"
import { CoreV1Api } from "@kubernetes/client-node"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { type RunningApi, startEmbeddedApi } from "../../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../../kubeserver/resource-types.ts"
import { ResourceClient } from "./resource-client.ts"
import { derivedScheduleLabel, type PipelineObject, pipelineLabel, runnelApiVersion } from "./resources.ts"

// The one client of runnel's resources against the embedded API with runnel's own CRDs, over loopback HTTP.
const crds = loadCrds(resolve(import.meta.dirname, "../../crds"))

let api: RunningApi
let client: ResourceClient

beforeEach(async () => {
  api = await startEmbeddedApi({ crds })
  client = new ResourceClient(api.kubeConfig, "default")
})
afterEach(async () => {
  await api.close()
})

const pipeline = (name: string, spec: Partial<PipelineObject["spec"]> = {}): PipelineObject => ({
  apiVersion: runnelApiVersion,
  kind: "Pipeline",
  metadata: { name },
  spec: { content: "export const pipeline = async () => {}\n", ...spec },
})

describe("the resource client", () => {
  it("reads what is gone as undefined, and a delete of it as false", async () => {
    expect(await client.getPipeline("missing")).toBeUndefined()
    expect(await client.getRun("missing")).toBeUndefined()
    expect(await client.patchRun("missing", { spec: { pipelineRef: { name: "p" }, stop: true } })).toBeUndefined()
    expect(await client.patchRunStatus("missing", { phase: "running" })).toBeUndefined()
    expect(await client.deletePipeline("missing")).toBe(false)
    expect(await client.deleteRun("missing")).toBe(false)
    expect(await client.deleteSchedule("missing")).toBe(false)
    expect(await client.deleteSecret("missing")).toBe(false)
  })

  it("lists and watches where the informers look", async () => {
    await client.createPipeline(pipeline("listed"))
    expect(client.path("runs")).toBe("/apis/runnel.dev/v1alpha1/namespaces/default/runs")
    expect((await client.list<PipelineObject>("pipelines")).items.map((item) => item.metadata?.name)).toEqual([
      "listed",
    ])
  })

  it("writes a Run's status without touching its spec, and its metadata without touching its status", async () => {
    await client.createRun({
      apiVersion: runnelApiVersion,
      kind: "Run",
      metadata: { name: "r1" },
      spec: { pipelineRef: { name: "p" }, trigger: { type: "cli", by: "someone" } },
    })
    await client.patchRunStatus("r1", { phase: "running", startedAt: "2026-01-01T00:00:00Z" })
    const run = await client.patchRunMetadata("r1", { annotations: { note: "kept" } })
    expect(run?.spec).toMatchObject({ pipelineRef: { name: "p" }, trigger: { type: "cli", by: "someone" } })
    expect(run?.status).toMatchObject({ phase: "running", startedAt: "2026-01-01T00:00:00Z" })
    expect(run?.metadata?.annotations).toEqual({ note: "kept" })
  })

  it("creates a Pipeline for set_pipeline, then replaces only its content", async () => {
    await client.setPipeline("made", "jobs: []\n")
    expect((await client.getPipeline("made"))?.spec).toMatchObject({ content: "jobs: []\n", contentType: "yaml" })
    await client.patchPipeline("made", { spec: { content: "jobs: []\n", paused: true } })
    await client.setPipeline("made", "jobs: [{name: a, plan: []}]\n")
    expect((await client.getPipeline("made"))?.spec).toMatchObject({
      content: "jobs: [{name: a, plan: []}]\n",
      contentType: "yaml",
      paused: true,
    })
  })

  it("keeps a webhook secret in a Secret owned by its Pipeline, and replaces it in place", async () => {
    const stored = await client.createPipeline(pipeline("hooked", { webhookSecretRef: { name: "hooked-webhook" } }))
    await client.putWebhookSecret(stored, "first")
    await client.putWebhookSecret(stored, "second")
    expect(await client.webhookSecret(stored)).toBe("second")
    const secret = await api.kubeConfig
      .makeApiClient(CoreV1Api)
      .readNamespacedSecret({ name: "hooked-webhook", namespace: "default" })
    expect(secret.metadata?.labels).toEqual({ [pipelineLabel]: "hooked" })
    expect(secret.metadata?.ownerReferences).toEqual([
      { apiVersion: "runnel.dev/v1alpha1", kind: "Pipeline", name: "hooked", uid: stored.metadata?.uid },
    ])
    expect(Object.keys(secret.data ?? {})).toEqual(["webhookSecret"])
    expect(await client.webhookSecret(pipeline("plain"))).toBeUndefined()
  })

  it("refuses with 503 while the Secret a Pipeline names is missing, rather than accept unsigned webhooks", async () => {
    const stored = await client.createPipeline(pipeline("orphan", { webhookSecretRef: { name: "gone", key: "k" } }))
    await expect(client.webhookSecret(stored)).rejects.toMatchObject({
      status: 503,
      code: "webhook_secret_missing",
      message: expect.stringContaining('(Secret "gone", key "k")'),
    })
  })

  it("finds the Schedules derived from one Pipeline by their labels, not those applied by hand", async () => {
    for (const [name, owner, derived] of [
      ["a-nightly", "a", true],
      ["a-by-hand", "a", false],
      ["b-nightly", "b", true],
    ] as const) {
      await client.createSchedule({
        apiVersion: runnelApiVersion,
        kind: "Schedule",
        metadata: { name, labels: { [pipelineLabel]: owner, ...(derived ? { [derivedScheduleLabel]: "yaml" } : {}) } },
        spec: { pipelineRef: { name: owner }, jobName: "nightly", type: "cron", expression: "0 3 * * *" },
      })
    }
    await client.patchScheduleSpec("a-nightly", { expression: "0 4 * * *" })
    const schedules = await client.listSchedules("a")
    expect(schedules.map((schedule) => [schedule.metadata?.name, schedule.spec.expression])).toEqual([
      ["a-nightly", "0 4 * * *"],
    ])
  })
})
