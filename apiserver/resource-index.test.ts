import { describe, expect, it } from "vitest"
import type { RunObject } from "../lib/kube/resources.ts"
import { RunIndex } from "./resource-index.ts"

function run(name: string, second: number, pipeline: string, phase?: string, version = 1): RunObject {
  return {
    metadata: {
      name,
      uid: `uid-${name}`,
      resourceVersion: String(version),
      creationTimestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, second)).toISOString() as unknown as Date,
    },
    spec: { pipelineRef: { name: pipeline } },
    ...(phase === undefined ? {} : { status: { phase: phase as "success" } }),
  }
}

const names = (page: { items: RunObject[] }) => page.items.map((item) => item.metadata?.name)

describe("the run index", () => {
  const index = () => {
    const runs = new RunIndex()
    runs.observe(run("a", 1, "build", "success"))
    runs.observe(run("b", 2, "deploy", "failure"))
    runs.observe(run("c", 3, "build", "failure"))
    runs.observe(run("d", 4, "build"))
    runs.observe(run("e", 4, "deploy", "success"))
    return runs
  }

  it("pages newest first (ties by name), with the total, filtered by phase, pipeline or both", () => {
    const runs = index()
    expect(runs.page({}, 0, 2)).toMatchObject({ total: 5 })
    expect(names(runs.page({}, 0, 2))).toEqual(["e", "d"])
    expect(names(runs.page({}, 2, 2))).toEqual(["c", "b"])
    expect(names(runs.page({}, 4, 2))).toEqual(["a"])
    expect(names(runs.page({}, 6, 2))).toEqual([])
    expect(runs.page({ status: "failure" }, 0, 10)).toMatchObject({ total: 2 })
    expect(names(runs.page({ status: "failure" }, 0, 10))).toEqual(["c", "b"])
    expect(names(runs.page({ pipeline: "build" }, 1, 10))).toEqual(["c", "a"])
    expect(runs.page({ pipeline: "build", status: "failure" }, 0, 10)).toMatchObject({ total: 1 })
    expect(names(runs.page({ status: "queued", pipeline: "build" }, 0, 10))).toEqual(["d"])
    expect(runs.page({ status: "aborted" }, 0, 10)).toEqual({ items: [], total: 0 })
    expect(runs.page({ pipeline: "nope" }, 0, 10)).toEqual({ items: [], total: 0 })
  })

  it("moves a run between phases on a newer version, ignores an older one, and counts the queue", () => {
    const runs = index()
    expect(runs.queued()).toBe(1)
    expect(runs.observe(run("d", 4, "build", "running", 2))).toBe(true)
    expect(runs.queued()).toBe(0)
    expect(runs.observe(run("d", 4, "build", undefined, 1))).toBe(false)
    expect(names(runs.page({ status: "running" }, 0, 10))).toEqual(["d"])
    expect(runs.page({}, 0, 10).total).toBe(5)
  })

  it("forgets a deleted run everywhere and does not bring it back from a late event", () => {
    const runs = index()
    const c = runs.get("c") as RunObject
    expect(runs.forget(c)).toBe(true)
    expect(runs.observe(run("c", 3, "build", "failure", 5))).toBe(false)
    expect(names(runs.page({ status: "failure" }, 0, 10))).toEqual(["b"])
    expect(names(runs.page({ pipeline: "build" }, 0, 10))).toEqual(["d", "a"])
    expect(runs.page({}, 0, 10).total).toBe(4)
  })

  it("tells listeners of a run's newer versions and of its deletion", () => {
    const runs = index()
    const seen: (string | undefined)[] = []
    const unsubscribe = runs.onChange("d", (object) => seen.push(object?.status?.phase ?? (object && "queued")))
    runs.observe(run("d", 4, "build", "running", 2))
    runs.observe(run("e", 4, "deploy", "aborted", 2))
    runs.forget(runs.get("d") as RunObject)
    unsubscribe()
    runs.observe(run("d", 9, "build", "queued", 9))
    expect(seen).toEqual(["running", undefined])
  })
})
