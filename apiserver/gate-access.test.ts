import { describe, expect, it } from "vitest"
import type { GateObject, PipelineObject } from "../lib/kube/resources.ts"
import type { RequestUser } from "./auth/user.ts"
import { checkGateAccess, gateAccess } from "./gate-access.ts"

const user = (fields: Partial<RequestUser>): RequestUser => ({
  Email: "",
  Name: "",
  NickName: "",
  Provider: "github",
  UserID: "",
  Organizations: [],
  Groups: [],
  actor: "github:someone",
  authenticated: true,
  ...fields,
})
const gate = (approvers?: string): GateObject => ({
  metadata: { name: "run-1-gate-1" },
  spec: { runRef: { name: "run-1" }, name: "production", ...(approvers === undefined ? {} : { approvers }) },
})
const pipeline = (rbacExpression?: string): PipelineObject => ({
  metadata: { name: "release" },
  spec: { content: "", ...(rbacExpression === undefined ? {} : { rbacExpression }) },
})

describe("who may decide a gate", () => {
  const alice = user({ Name: "alice", Groups: ["release"], actor: "github:alice" })
  const bob = user({ Name: "bob", actor: "github:bob" })

  it("hides the gate (404) from a user the pipeline's RBAC refuses, so its existence does not leak", () => {
    expect(gateAccess(bob, gate(), pipeline('Name == "alice"'))).toBe("hidden")
    expect(() => checkGateAccess(bob, gate(), pipeline('Name == "alice"'))).toThrow(
      expect.objectContaining({ status: 404, message: 'gate "run-1-gate-1" not found' }),
    )
    expect(gateAccess(alice, gate(), pipeline('Name == "alice"'))).toBe("allowed")
  })

  it("forbids (403) a user the gate's approvers do not match, even one the pipeline lets in", () => {
    expect(gateAccess(bob, gate('"release" in Groups'), pipeline())).toEqual({
      forbidden: 'gate "production" may be decided only by users matching "release" in Groups',
    })
    expect(() => checkGateAccess(bob, gate('"release" in Groups'), pipeline())).toThrow(
      expect.objectContaining({ status: 403 }),
    )
    expect(gateAccess(alice, gate('"release" in Groups'), pipeline())).toBe("allowed")
  })

  it("in open access ignores the pipeline's RBAC but still applies approvers, pointing to kubectl", () => {
    const anonymous = user({ Name: "anonymous", Provider: "", actor: "anonymous", authenticated: false })
    expect(gateAccess(anonymous, gate(), pipeline('Name == "alice"'))).toBe("allowed")
    const refused = gateAccess(anonymous, gate('"release" in Groups'), pipeline())
    expect(refused).toEqual({ forbidden: expect.stringContaining("kubectl patch gate run-1-gate-1 --type merge") })
  })
})
