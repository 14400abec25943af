import { join } from "node:path"
import { CustomObjectsApi } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { kubeApiContract, kubePodContract, refusal } from "../lib/kube/kube-api-contract.fixture.ts"
import { describeDocker, dockerHost } from "../test/docker.ts"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { startEmbeddedApi } from "./embedded-api.fixture.ts"
import { loadCrds } from "./resource-types.ts"

const runnelCrds = loadCrds(join(import.meta.dirname, "..", "crds"))

kubeApiContract("the embedded", async () => {
  const running = await startEmbeddedApi({ crds: runnelCrds })
  return { kubeConfig: running.kubeConfig, settled: () => running.api.settled(), close: () => running.close() }
})

describeDocker("Pods in Docker", () => {
  kubePodContract("the embedded", async () => {
    const running = await startEmbeddedApi({ crds: runnelCrds, dockerHost })
    return { kubeConfig: running.kubeConfig, settled: () => running.api.settled(), close: () => running.close() }
  })
})

describe("the embedded API beyond the shared contract", () => {
  let running: RunningApi
  let objects: CustomObjectsApi
  const pipelines = { group: "runnel.dev", version: "v1alpha1", namespace: "default", plural: "pipelines" }

  beforeAll(async () => {
    running = await startEmbeddedApi()
    objects = running.kubeConfig.makeApiClient(CustomObjectsApi)
  })
  afterAll(() => running.close())

  const body = (name: string, spec: object = { content: "x" }) => ({
    apiVersion: "runnel.dev/v1alpha1",
    kind: "Pipeline",
    metadata: { name },
    spec,
  })

  it("applies the schema's limits on metadata.name", async () => {
    const { code, status } = await refusal(
      objects.createNamespacedCustomObject({ ...pipelines, body: body("a".repeat(64)) }),
    )
    expect(code).toBe(422)
    expect(status.message).toContain("metadata.name: Too long: may not be more than 63 bytes")
  })

  it("names unknown top-level fields in a strict refusal", async () => {
    const { status } = await refusal(
      objects.createNamespacedCustomObject({
        ...pipelines,
        body: { ...body("strict"), extra: 1 },
        fieldValidation: "Strict",
      }),
    )
    expect(status.message).toContain('unknown field "extra"')
  })

  it("refuses a continue token it did not issue with 400", async () => {
    expect(
      (await refusal(objects.listNamespacedCustomObject({ ...pipelines, _continue: "bm90IGEgdG9rZW4" }))).code,
    ).toBe(400)
  })

  it("reports a type error with the value's type, as Kubernetes does", async () => {
    const { status } = await refusal(
      objects.createNamespacedCustomObject({ ...pipelines, body: body("typed", { content: "x", retries: "three" }) }),
    )
    expect(status.message).toBe(
      'Pipeline.runnel.dev "typed" is invalid: spec.retries: Invalid value: "string": spec.retries in body must be of type integer: "string"',
    )
  })
})
