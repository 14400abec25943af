import { join } from "node:path"
import { describe, expect, it, onTestFinished } from "vitest"
import { createEmbeddedApi } from "./embedded-api.ts"
import { loadCrds, parseCrds, resourceTypesFromCrds } from "./resource-types.ts"

const crdsDir = join(import.meta.dirname, "..", "crds")

describe("CRD loading", () => {
  it("reads apiextensions.k8s.io/v1 CRDs and skips other documents", () => {
    const crds = parseCrds(`apiVersion: v1
kind: ConfigMap
metadata: {name: skipped}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Widget, plural: widgets}
  versions:
    - {name: v1, served: true, storage: true}
    - {name: v0, served: false, storage: false}
`)
    const [type, ...rest] = resourceTypesFromCrds(crds)
    expect(rest).toEqual([])
    expect(type).toMatchObject({
      apiVersion: "example.com/v1",
      kind: "Widget",
      listKind: "WidgetList",
      singular: "widget",
      namespaced: false,
      statusSubresource: false,
      printerColumns: [{ name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" }],
    })
  })

  it("names the file of a broken document", () => {
    expect(() => parseCrds("a: [", "crds/bad.yaml")).toThrow(/^crds\/bad\.yaml: /)
  })

  it("serves runnel's CRDs from crds/ and accepts the smallest valid resources of contract section 7", () => {
    const api = createEmbeddedApi({ db: ":memory:", crds: loadCrds(crdsDir) })
    onTestFinished(() => api.close())
    const { resources } = api
    const plurals = resources.types.all.filter((type) => type.group === "runnel.dev").map((type) => type.plural)
    expect(plurals.sort()).toEqual(expect.arrayContaining(["pipelines", "runs"]))
    const pipelineType = resources.types.byPath("runnel.dev/v1alpha1", "pipelines")
    const runType = resources.types.byPath("runnel.dev/v1alpha1", "runs")
    if (pipelineType === undefined || runType === undefined) throw new Error("crds/ lacks Pipeline or Run")
    resources.create(pipelineType, "default", {
      metadata: { name: "p" },
      spec: { content: "export async function pipeline() {}" },
    })
    const { object: run } = resources.create(runType, "default", {
      metadata: { name: "r" },
      spec: { pipelineRef: { name: "p" } },
    })
    expect(run.spec).toMatchObject({ trigger: { type: "manual" } })
    expect(() =>
      resources.patch(runType, "default", "r", "application/merge-patch+json", {
        spec: { pipelineRef: { name: "q" } },
      }),
    ).toThrow(/spec\.pipelineRef: Invalid value: "object": spec\.pipelineRef is immutable/)
  })
})
