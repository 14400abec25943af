import Router from "@koa/router"
import type { Middleware } from "koa"
import { badRequest, featureDisabled, notFound } from "../../lib/core/errors.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import { type GateObject, gateCreatedAt } from "../../lib/kube/resources.ts"
import { requestUser } from "../auth/authenticate.ts"
import type { RequestUser } from "../auth/user.ts"
import { objectBody, onlyFields } from "../body.ts"
import { isResourceName } from "../find-pipeline.ts"
import { checkGateAccess, gateAccess } from "../gate-access.ts"
import { decideGate, type GateDecisionDeps, gatePipeline, gateView } from "../gate-decision.ts"
import { queryString } from "../views.ts"

export type GateRoutesDeps = GateDecisionDeps & {
  resources: Pick<ResourceClient, "listGates">
  /** The enabled feature names: every gate path answers 403 unless `gates` is one. */
  features: readonly string[]
}
const gatePhases: readonly string[] = ["pending", "approved", "rejected", "expired"]

const byCreation = (a: GateObject, b: GateObject) => gateCreatedAt(a) - gateCreatedAt(b)

/** Gates over the Gate resource (contract.md sections 4 and 7): list, read, approve, reject. */
export function gateRoutes(deps: GateRoutesDeps): Router {
  const { resources, index, features } = deps
  const router = new Router()
  // Every gate path: checked first, so a disabled feature answers 403 whatever the request.
  const enabled: Middleware = async (_ctx, next) => {
    if (!features.includes("gates")) throw featureDisabled("gates")
    await next()
  }

  const pipelineOf = (gate: GateObject) => gatePipeline(index, gate)
  // A gate of a pipeline the user may not see is absent everywhere: from lists, and 404 on its own paths.
  const visible = (user: RequestUser) => (gate: GateObject) => gateAccess(user, gate, pipelineOf(gate)) !== "hidden"
  const found = async (id: string, user: RequestUser) => {
    const gate = isResourceName(id) ? await resources.getGate(id) : undefined
    if (gate === undefined || !visible(user)(gate)) throw notFound("gate", id)
    return gate
  }

  router.get("/api/runs/:id/gates", enabled, async (ctx) => {
    const id = ctx.params.id ?? ""
    const run = isResourceName(id) ? await resources.getRun(id) : undefined
    if (run === undefined) throw notFound("run", id)
    ctx.body = (await resources.listGates(id))
      .filter(visible(requestUser(ctx)))
      .sort(byCreation)
      .map(gateView)
  })

  router.get("/api/gates", enabled, async (ctx) => {
    const status = queryString(ctx.query, "status")
    if (status !== undefined && !gatePhases.includes(status)) {
      throw badRequest(`?status=${status} is not a gate status; known: ${gatePhases.join(", ")}`)
    }
    const run = queryString(ctx.query, "run_id")
    const gates = await resources.listGates(run)
    ctx.body = gates
      .filter(visible(requestUser(ctx)))
      .filter((gate) => status === undefined || (gate.status?.phase ?? "pending") === status)
      .sort(byCreation)
      .map(gateView)
  })

  router.get("/api/gates/:id", enabled, async (ctx) => {
    ctx.body = gateView(await found(ctx.params.id ?? "", requestUser(ctx)))
  })

  for (const phase of ["approved", "rejected"] as const) {
    const action = phase === "approved" ? "approve" : "reject"
    router.post(`/api/gates/:id/${action}`, enabled, async (ctx) => {
      const body = objectBody(ctx.state.body, { required: false })
      onlyFields(body, ["comment"])
      if (body.comment !== undefined && typeof body.comment !== "string") {
        throw badRequest(`"comment" must be a string, not ${typeof body.comment}`)
      }
      const user = requestUser(ctx)
      const gate = await found(ctx.params.id ?? "", user)
      checkGateAccess(user, gate, pipelineOf(gate))
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
