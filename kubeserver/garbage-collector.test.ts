import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { testCrds } from "./embedded-api.fixture.ts"
import { createEmbeddedApi } from "./embedded-api.ts"

// The cascading-deletion behaviour every API shares is in ../kube-api-contract.fixture.ts; these are the embedded collector's own cases.
const dirs: string[] = []
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

function open(path: string) {
  const api = createEmbeddedApi({ db: path, crds: testCrds })
  const types = api.resources.types
  const pipelineType = types.byPath("runnel.dev/v1alpha1", "pipelines")
  const runType = types.byPath("runnel.dev/v1alpha1", "runs")
  if (pipelineType === undefined || runType === undefined) throw new Error("the test CRDs lack Pipeline or Run")
  return { api, pipelineType, runType }
}

const run = (name: string, owner: { name?: string; uid?: string }, extra: object = {}) => ({
  metadata: {
    name,
    ownerReferences: [
      {
        apiVersion: "runnel.dev/v1alpha1",
        kind: "Pipeline",
        name: owner.name ?? "",
        uid: owner.uid ?? "",
        blockOwnerDeletion: true,
      },
    ],
    ...extra,
  },
  spec: { pipelineRef: { name: owner.name ?? "" } },
})

describe("the embedded garbage collector", () => {
  it("deletes a dependent whose owner never existed", async () => {
    const { api, runType } = open(":memory:")
    api.resources.create(
      runType,
      "default",
      run("dangling", { name: "ghost", uid: "00000000-0000-0000-0000-000000000000" }),
    )
    await api.settled()
    expect(() => api.resources.get(runType, "default", "dangling")).toThrow('runs.runnel.dev "dangling" not found')
    api.close()
  })

  it("finishes a foreground deletion that was pending when the process stopped", async () => {
    const dir = mkdtempSync(join(tmpdir(), "runnel-gc-"))
    dirs.push(dir)
    const path = join(dir, "kube.db")
    const first = open(path)
    const { object: owner } = first.api.resources.create(first.pipelineType, "default", {
      metadata: { name: "owner" },
      spec: { content: "x" },
    })
    first.api.resources.create(
      first.runType,
      "default",
      run("held", owner.metadata, { finalizers: ["runnel.dev/hold"] }),
    )
    first.api.resources.delete(first.pipelineType, "default", "owner", { propagationPolicy: "Foreground" })
    await first.api.settled()
    expect(first.api.resources.get(first.pipelineType, "default", "owner").metadata.finalizers).toEqual([
      "foregroundDeletion",
    ])
    // The dependent's finalizer goes, and the process stops before the collector gets to the owner.
    const held = first.api.resources.get(first.runType, "default", "held")
    first.api.resources.update(first.runType, "default", "held", {
      ...held,
      metadata: { ...held.metadata, finalizers: [] },
    })
    first.api.close()

    const second = open(path)
    await second.api.settled()
    expect(() => second.api.resources.get(second.runType, "default", "held")).toThrow("not found")
    expect(() => second.api.resources.get(second.pipelineType, "default", "owner")).toThrow("not found")
    second.api.close()
  })
})
