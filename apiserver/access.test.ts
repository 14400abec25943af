import { describe, expect, it } from "vitest"
import type { GateObject, PipelineObject } from "../lib/kube/resources.ts"
import { AccessPolicy } from "./access.ts"
import { anonymousUser, basicUser, type RequestUser } from "./auth/user.ts"

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

describe("the one access decision", () => {
  const alice = user({ Name: "alice", Groups: ["release"], actor: "github:alice" })
  const bob = user({ Name: "bob", actor: "github:bob" })
  const logged: Record<string, unknown>[] = []
  const policy = new AccessPolicy({ log: (_event, fields) => logged.push({ ...fields }) })

  it("refuses (403) a pipeline, and so its gates, to a user its RBAC refuses", () => {
    expect(policy.decide(bob, { pipeline: pipeline('Name == "alice"') })).toEqual({
      forbidden: expect.stringContaining('you (github:bob) may not see pipeline "release"'),
    })
    expect(() => policy.check(bob, { pipeline: pipeline('Name == "alice"'), decide: gate() })).toThrow(
      expect.objectContaining({ status: 403 }),
    )
    expect(policy.decide(alice, { pipeline: pipeline('Name == "alice"'), decide: gate() })).toBe("allowed")
  })

  it("refuses a pipeline with an expression to the Basic Auth user, and lets them see the others", () => {
    const admin = basicUser("admin")
    expect(policy.mayView(admin, pipeline('Name == "admin"'))).toBe(false)
    expect(policy.decide(admin, { pipeline: pipeline('Name == "admin"') })).toEqual({
      forbidden: expect.stringContaining("Basic Auth users have no provider identity"),
    })
    expect(policy.mayView(admin, pipeline())).toBe(true)
  })

  it("counts an expression that fails at evaluation, or no longer compiles, as false, and logs it without credentials", () => {
    logged.length = 0
    expect(policy.mayView(alice, pipeline('Organizations[3] == "x"'))).toBe(false)
    expect(policy.mayView(alice, pipeline("Name ==="))).toBe(false)
    expect(logged).toEqual([
      expect.objectContaining({ rule: "pipeline release", actor: "github:alice" }),
      expect.objectContaining({ rule: "pipeline release", actor: "github:alice", error: expect.stringMatching(/1:/) }),
    ])
  })

  it("refuses everything to an authenticated user who fails --server-rbac, and nothing in open access", () => {
    const strict = new AccessPolicy({ serverRbac: 'Email.endsWith("@corp.example")', log: () => {} })
    expect(strict.decide(bob)).toEqual({ forbidden: expect.stringContaining("--server-rbac") })
    expect(strict.mayView(bob, pipeline())).toBe(false)
    expect(strict.decide(user({ Email: "carol@corp.example" }))).toBe("allowed")
    expect(strict.decide(anonymousUser, { pipeline: pipeline('Name == "alice"') })).toBe("allowed")
  })

  it("answers the Kubernetes API only to users matching --k8s-admin-rbac, and to none without it", () => {
    const admins = new AccessPolicy({
      kubernetesAdmins: '"ops" in Groups',
      serverRbac: '!("blocked" in Groups)',
      log: () => {},
    })
    expect(admins.decide(user({ Groups: ["ops"] }), { kubernetesApi: true })).toBe("allowed")
    expect(admins.decide(bob, { kubernetesApi: true })).toEqual({
      forbidden:
        'user "github:bob" is not an admin of this runnel server\'s Kubernetes API: it answers only users who match --k8s-admin-rbac',
    })
    expect(admins.decide(user({ Groups: ["ops", "blocked"] }), { kubernetesApi: true })).toEqual({
      forbidden: expect.stringContaining("--server-rbac"),
    })
    expect(policy.decide(bob, { kubernetesApi: true })).toEqual({
      forbidden: expect.stringContaining("answers no user yet: start the server with --k8s-admin-rbac EXPR"),
    })
    expect(() => new AccessPolicy({ kubernetesAdmins: "NickName ==", log: () => {} })).toThrow(
      /^--k8s-admin-rbac: invalid expression at 1:\d+/,
    )
  })

  it("stops at start on a --server-rbac that does not compile, naming the flag and the position", () => {
    expect(() => new AccessPolicy({ serverRbac: 'Email == "a" &&', log: () => {} })).toThrow(
      expect.objectContaining({
        status: 400,
        message: expect.stringMatching(/^--server-rbac: invalid expression at 1:\d+/),
      }),
    )
    expect(() => new AccessPolicy({ serverRbac: "Team == 1", log: () => {} })).toThrow(/unknown variable|Team/)
  })
})

describe("who may decide a gate", () => {
  const alice = user({ Name: "alice", Groups: ["release"], actor: "github:alice" })
  const bob = user({ Name: "bob", actor: "github:bob" })
  const policy = new AccessPolicy({ log: () => {} })
  const gateAccess = (who: RequestUser, decided: GateObject, of: PipelineObject) =>
    policy.decide(who, { pipeline: of, decide: decided })

  it("forbids (403) a user the gate's approvers do not match, even one the pipeline lets in", () => {
    expect(gateAccess(bob, gate('"release" in Groups'), pipeline())).toEqual({
      forbidden: 'gate "production" may be decided only by users matching "release" in Groups',
    })
    expect(() => policy.check(bob, { pipeline: pipeline(), decide: gate('"release" in Groups') })).toThrow(
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
