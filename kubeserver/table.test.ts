import { describe, expect, it } from "vitest"
import { testCrds } from "./embedded-api.fixture.ts"
import { resourceTypesFromCrds } from "./resource-types.ts"
import { evaluateJsonPath, humanDuration, toTable } from "./table.ts"

const object = {
  apiVersion: "runnel.dev/v1alpha1",
  kind: "Pipeline",
  metadata: { name: "p", creationTimestamp: "2024-01-01T00:00:00Z" },
  spec: { paused: true, list: [1, 2] },
  status: {
    conditions: [
      { type: "Other", status: "False" },
      { type: "Ready", status: "True", message: "ok" },
    ],
  },
}

describe("server-side printing", () => {
  it("evaluates the JSONPath of printer columns, filters included", () => {
    expect(evaluateJsonPath(".spec.paused", object)).toEqual([true])
    expect(evaluateJsonPath('.status.conditions[?(@.type=="Ready")].status', object)).toEqual(["True"])
    expect(evaluateJsonPath("{.spec.list[*]}", object)).toEqual([1, 2])
    expect(evaluateJsonPath(".spec.list[-1]", object)).toEqual([2])
    expect(evaluateJsonPath(".metadata['name']", object)).toEqual(["p"])
    expect(evaluateJsonPath(".spec.missing.deeper", object)).toEqual([])
  })

  it("shows ages as kubectl does", () => {
    expect(
      [5, 150, 600, 3 * 3600, 30 * 3600, 3 * 86400 + 3600, 400 * 86400, 3 * 365 * 86400].map((s) =>
        humanDuration(s * 1000),
      ),
    ).toEqual(["5s", "2m30s", "10m", "3h", "30h", "3d1h", "400d", "3y"])
  })

  it("builds a Table with Name first and the CRD's columns", () => {
    const type = resourceTypesFromCrds(testCrds).find((candidate) => candidate.kind === "Pipeline")
    if (type === undefined) throw new Error("no Pipeline in the test CRDs")
    const table = toTable(
      type,
      { apiVersion: "", kind: "", metadata: { resourceVersion: "9" }, items: [object] },
      "Metadata",
      new Date("2024-01-01T00:05:00Z"),
    )
    expect(table.columnDefinitions.map((column) => column.name)).toEqual(["Name", "Ready", "Paused", "Age"])
    expect(table.rows[0]?.cells).toEqual(["p", "True", true, "5m"])
    expect(table.rows[0]?.object).toEqual({
      kind: "PartialObjectMetadata",
      apiVersion: "meta.k8s.io/v1",
      metadata: object.metadata,
    })
  })
})
