import { describe, expect, it } from "vitest"
import { type Condition, kubeTime, pipelineOwnerReference, resourcePath, withCondition } from "./resources.ts"

const ready = (status: Condition["status"], at: string, message = ""): Condition => ({
  type: "Ready",
  status,
  reason: status === "True" ? "Valid" : "InvalidContent",
  message,
  lastTransitionTime: at,
})

describe("the resource model", () => {
  it("ties a dependent to its Pipeline by name and uid, as garbage collection needs", () => {
    expect(pipelineOwnerReference({ metadata: { name: "build", uid: "u-1" } })).toEqual({
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Pipeline",
      name: "build",
      uid: "u-1",
    })
  })

  it("names the path a kind of one namespace is listed at", () => {
    expect(resourcePath("team-a", "gates")).toBe("/apis/runnel.dev/v1alpha1/namespaces/team-a/gates")
  })

  it("moves a condition's transition time only when its status changes", () => {
    const first = withCondition(undefined, ready("False", "2026-01-01T00:00:00Z", "line 1"))
    const same = withCondition(first, ready("False", "2026-01-02T00:00:00Z", "line 2"))
    expect(same).toEqual([ready("False", "2026-01-01T00:00:00Z", "line 2")])
    const changed = withCondition(same, ready("True", "2026-01-03T00:00:00Z"))
    expect(changed).toEqual([ready("True", "2026-01-03T00:00:00Z")])
  })

  it("keeps the other conditions in place", () => {
    const other: Condition = { ...ready("True", "2026-01-01T00:00:00Z"), type: "Scheduled" }
    expect(withCondition([other], ready("True", "2026-01-02T00:00:00Z"))).toEqual([
      other,
      ready("True", "2026-01-02T00:00:00Z"),
    ])
  })

  it("writes Kubernetes timestamps in whole seconds", () => {
    expect(kubeTime(new Date("2026-03-04T05:06:07.890Z"))).toBe("2026-03-04T05:06:07Z")
  })
})
