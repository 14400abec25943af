import { describe, expect, it } from "vitest"
import type { JsonSchema } from "./schema.ts"
import { applyDefaults, canonical, pruneUnknownFields, validateSchema } from "./schema.ts"

const schema: JsonSchema = {
  type: "object",
  properties: {
    spec: {
      type: "object",
      required: ["name"],
      properties: {
        name: { type: "string", pattern: "^[a-z]+$", maxLength: 5 },
        count: { type: "integer", minimum: 1, default: 1 },
        mode: { type: "string", enum: ["a", "b"] },
        free: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
        labels: { type: "object", additionalProperties: { type: "string" } },
        at: { type: "string", format: "date-time" },
        port: { "x-kubernetes-int-or-string": true },
        ref: {
          type: "object",
          properties: { id: { type: "string" } },
          "x-kubernetes-validations": [{ rule: "self == oldSelf", message: "ref is immutable" }],
        },
        items: {
          type: "array",
          "x-kubernetes-list-type": "map",
          "x-kubernetes-list-map-keys": ["key"],
          items: { type: "object", properties: { key: { type: "string" }, value: { type: "string" } } },
        },
      },
    },
  },
}

const messages = (value: unknown, old?: unknown) =>
  validateSchema(value, schema, "", old).map((error) => `${error.field}: ${error.message}`)

describe("structural schemas", () => {
  it("prune unknown fields, except where the schema preserves them, and report their paths", () => {
    const value = {
      spec: { name: "a", extra: 1, free: { any: 1 }, labels: { x: "y" }, items: [{ key: "k", other: 1 }] },
      top: 1,
    }
    expect(pruneUnknownFields(value, schema)).toEqual(["spec.extra", "spec.items[0].other", "top"])
    expect(value).toEqual({ spec: { name: "a", free: { any: 1 }, labels: { x: "y" }, items: [{ key: "k" }] } })
  })

  it("drop nulls of non-nullable fields and apply defaults", () => {
    const value = { spec: { name: "a", count: null } }
    applyDefaults(value, schema)
    expect(value).toEqual({ spec: { name: "a", count: 1 } })
  })

  it("report each violation in Kubernetes' words", () => {
    expect(messages({ spec: { name: "ABCDEFG", count: 0, mode: "c", at: "yesterday", port: 1.5 } })).toEqual([
      "spec.name: Too long: may not be more than 5 bytes",
      "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
      "spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1",
      'spec.mode: Unsupported value: "c": supported values: "a", "b"',
      'spec.at: Invalid value: "yesterday": spec.at in body must be of type date-time: "yesterday"',
      'spec.port: Invalid value: "number": spec.port in body must be of type integer,string: "number"',
    ])
    expect(messages({ spec: {} })).toEqual(["spec.name: Required value"])
    expect(messages({ spec: { name: "a", labels: { x: 1 } } })).toEqual([
      'spec.labels[x]: Invalid value: "integer": spec.labels[x] in body must be of type string: "integer"',
    ])
  })

  it("refuse duplicate keys in map lists", () => {
    expect(messages({ spec: { name: "a", items: [{ key: "k" }, { key: "k" }] } })).toEqual([
      'spec.items[1]: Duplicate value: {key: "k"}',
    ])
  })

  it("enforce self == oldSelf only on updates", () => {
    expect(messages({ spec: { name: "a", ref: { id: "1" } } })).toEqual([])
    expect(messages({ spec: { name: "a", ref: { id: "2" } } }, { spec: { name: "a", ref: { id: "1" } } })).toEqual([
      'spec.ref: Invalid value: "object": ref is immutable',
    ])
  })

  it("do not check again the stored object a write leaves in place, and check an equal copy", () => {
    const stored = { name: "TOO-LONG" }
    expect(messages({ spec: stored }, { spec: stored })).toEqual([])
    expect(messages({ spec: { ...stored } }, { spec: stored })).toHaveLength(2)
  })

  it("sort keys at every level, as Kubernetes stores custom resources", () => {
    expect(JSON.stringify(canonical({ b: 1, a: { d: [{ z: 1, y: 2 }], c: 3 } }))).toBe(
      '{"a":{"c":3,"d":[{"y":2,"z":1}]},"b":1}',
    )
  })
})
