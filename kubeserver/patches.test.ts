import { describe, expect, it } from "vitest"
import { jsonPatch, mergePatch, type PatchError, strategicMergePatch } from "./patches.ts"

describe("merge patch (RFC 7386)", () => {
  it("merges objects, deletes nulls and replaces arrays", () => {
    expect(mergePatch({ a: { b: 1, c: 2 }, list: [1, 2] }, { a: { b: null, d: 3 }, list: [3] })).toEqual({
      a: { c: 2, d: 3 },
      list: [3],
    })
  })
})

describe("JSON patch (RFC 6902)", () => {
  const doc = { spec: { items: ["a", "b"], name: "x" } }

  it("applies add, remove, replace, move, copy and test in order", () => {
    const result = jsonPatch(doc, [
      { op: "add", path: "/spec/items/-", value: "c" },
      { op: "add", path: "/spec/items/0", value: "z" },
      { op: "remove", path: "/spec/items/1" },
      { op: "replace", path: "/spec/name", value: "y" },
      { op: "copy", from: "/spec/name", path: "/spec/copy" },
      { op: "move", from: "/spec/copy", path: "/spec/moved" },
      { op: "test", path: "/spec/moved", value: "y" },
      { op: "add", path: "/spec/a~1b", value: 1 },
    ])
    expect(result).toEqual({ spec: { items: ["z", "b", "c"], name: "y", moved: "y", "a/b": 1 } })
    expect(doc.spec.items).toEqual(["a", "b"])
  })

  it("fails a test or a missing path with 422 and a malformed patch with 400", () => {
    const status = (operations: unknown) => {
      try {
        jsonPatch(doc, operations)
      } catch (error) {
        return (error as PatchError).status
      }
      return 200
    }
    expect(status([{ op: "test", path: "/spec/name", value: "other" }])).toBe(422)
    expect(status([{ op: "replace", path: "/spec/none", value: 1 }])).toBe(422)
    expect(status([{ op: "remove", path: "/spec/items/5" }])).toBe(422)
    expect(status({ op: "add" })).toBe(400)
    expect(status([{ op: "frobnicate", path: "/" }])).toBe(400)
    expect(status([{ op: "add", path: "/spec/x" }])).toBe(400)
  })
})

describe("strategic merge patch for core kinds", () => {
  it("merges finalizers as a set and owner references by uid, and honours directives", () => {
    const secret = {
      metadata: { finalizers: ["a"], ownerReferences: [{ uid: "1", name: "one" }], labels: { keep: "1", drop: "2" } },
      data: { k: "dg==" },
    }
    const patched = strategicMergePatch(secret, {
      $setElementOrder: undefined,
      "$setElementOrder/finalizers": ["a", "b"],
      metadata: {
        finalizers: ["b"],
        ownerReferences: [
          { uid: "2", name: "two" },
          { uid: "1", $patch: "delete" },
        ],
        labels: { drop: null },
      },
      data: { $patch: "replace", other: "eA==" },
    })
    expect(patched).toEqual({
      metadata: { finalizers: ["a", "b"], ownerReferences: [{ uid: "2", name: "two" }], labels: { keep: "1" } },
      data: { other: "eA==" },
    })
  })
})
