import Router from "@koa/router"
import type { Middleware } from "koa"
import { badRequest, featureDisabled } from "../../lib/core/errors.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import { type GateObject, gateCreatedAt } from "../../lib/kube/resources.ts"
import type { AccessPolicy } from "../access.ts"
import { requestUser } from "../auth/authenticate.ts"
import { objectBody, onlyFields } from "../body.ts"
import { decideGate, type GateDecisionDeps, gateView } from "../gate-decision.ts"
import { checked, gatePipeline, type RouteAccess } from "../route-access.ts"
import { queryString } from "../views.ts"

export type GateRoutesDeps = GateDecisionDeps & {
  resources: Pick<ResourceClient, "listGates">
  policy: Pick<AccessPolicy, "mayView" | "check">
  access: RouteAccess
  /** The enabled feature names: every gate path answers 403 unless `gates` is one. */
  features: readonly string[]
}

const gatePhases: readonly string[] = ["pending", "approved", "rejected", "expired"]

const byCreation = (a: GateObject, b: GateObject) => gateCreatedAt(a) - gateCreatedAt(b)

/** Gates over the Gate resource (contract.md sections 4 and 7): list, read, approve, reject. */
export function gateRoutes(deps: GateRoutesDeps): Router {
  const { resources, index, features, policy, access } = deps
  const router = new Router()
  // Every gate path: checked first, so a disabled feature answers 403 whatever the request.
  const enabled: Middleware = async (_ctx, next) => {
    if (!features.includes("gates")) throw featureDisabled("gates")
    await next()
  }

  const pipelineOf = (gate: GateObject) => gatePipeline(index, gate)

  // The run's check already refused a user who may not see its pipeline, and its gates share it.
  router.get("/api/runs/:id/gates", enabled, access.run, async (ctx) => {
    const id = checked.run(ctx.state).metadata?.name ?? ""
    ctx.body = (await resources.listGates(id)).sort(byCreation).map(gateView)
  })

  // A gate of a pipeline the user may not see is absent from the list, and 403 on its own paths.
  router.get("/api/gates", enabled, access.user, async (ctx) => {
    const status = queryString(ctx.query, "status")
    if (status !== undefined && !gatePhases.includes(status)) {
      throw badRequest(`?status=${status} is not a gate status; known: ${gatePhases.join(", ")}`)
    }
    const run = queryString(ctx.query, "run_id")
    const gates = await resources.listGates(run)
    const user = requestUser(ctx)
    ctx.body = gates
      .filter((gate) => policy.mayView(user, pipelineOf(gate)))
      .filter((gate) => status === undefined || (gate.status?.phase ?? "pending") === status)
      .sort(byCreation)
      .map(gateView)
  })

  router.get("/api/gates/:id", enabled, access.gate, async (ctx) => {
    ctx.body = gateView(checked.gate(ctx.state))
  })

  for (const phase of ["approved", "rejected"] as const) {
    const action = phase === "approved" ? "approve" : "reject"
    router.post(`/api/gates/:id/${action}`, enabled, access.gate, async (ctx) => {
      const body = objectBody(ctx.state.body, { required: false })
      onlyFields(body, ["comment"])
      if (body.comment !== undefined && typeof body.comment !== "string") {
        throw badRequest(`"comment" must be a string, not ${typeof body.comment}`)
      }
      const user = requestUser(ctx)
      const gate = checked.gate(ctx.state)
      policy.check(user, { pipeline: pipelineOf(gate), decide: gate })
      const decision = {
        phase,
        by: user.actor,
        ...(body.comment === undefined || body.comment === "" ? {} : { comment: body.comment }),
      }
      ctx.body = gateView(await decideGate(deps, gate, decision))
    })
  }
  return router
}
