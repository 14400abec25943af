import Router from "@koa/router"
import { ApiException } from "@kubernetes/client-node"
import type { Middleware } from "koa"
import { badRequest, featureDisabled, notFound, RunnelError } from "../../lib/core/errors.ts"
import { isFinalRunStatus } from "../../lib/core/status.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import { type GateDecision, type GateObject, gateCreatedAt, isFinalGate } from "../../lib/kube/resources.ts"
import type { AccessPolicy } from "../access.ts"
import { type AuditLog, gateDecisionEntry } from "../audit.ts"
import { requestUser } from "../auth/authenticate.ts"
import { objectBody, onlyFields } from "../body.ts"
import type { OwnWrites } from "../kubernetes-audit.ts"
import type { ResourceIndex } from "../resource-index.ts"
import { checked, gatePipeline, type RouteAccess } from "../route-access.ts"
import { queryString } from "../views.ts"

export type GateRoutesDeps = {
  resources: Pick<ResourceClient, "getRun" | "getGate" | "listGates" | "decideGate">
  policy: Pick<AccessPolicy, "mayView" | "check">
  access: RouteAccess
  index: Pick<ResourceIndex, "pipelines">
  /** The enabled feature names: every gate path answers 403 unless `gates` is one. */
  features: readonly string[]
  audit: AuditLog
  /** Decisions this server writes, so the audit of the watch leaves them to the route. */
  own: Pick<OwnWrites, "deciding" | "claimDecision">
}

/** How long approve and reject wait for the operator to write the decision into the gate's status. */
const resolveWaitMs = 5_000

/** The gate object of contract.md section 4, plus the approver's comment and the timeout. */
function gateView(gate: GateObject) {
  const { metadata = {}, spec, status = {} } = gate
  return {
    id: metadata.name ?? "",
    run_id: spec.runRef.name,
    name: spec.name,
    status: status.phase ?? "pending",
    message: spec.message ?? "",
    created_at: new Date(gateCreatedAt(gate)).toISOString(),
    resolved_at: status.resolvedAt ?? null,
    resolved_by: status.resolvedBy || null,
    comment: status.comment ?? "",
    timeout: spec.timeout ?? null,
  }
}

const gatePhases: readonly string[] = ["pending", "approved", "rejected", "expired"]

const byCreation = (a: GateObject, b: GateObject) => gateCreatedAt(a) - gateCreatedAt(b)

/** Gates over the Gate resource (contract.md sections 4 and 7): list, read, approve, reject. */
export function gateRoutes({ resources, index, features, audit, own, policy, access }: GateRoutesDeps): Router {
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
      const id = gate.metadata?.name ?? ""
      await refuseDecided(gate, resources)
      const decision: GateDecision = {
        phase,
        by: user.actor,
        ...(body.comment === undefined || body.comment === "" ? {} : { comment: body.comment }),
      }
      own.deciding(id)
      try {
        if ((await resources.decideGate(gate, decision)) === undefined) throw notFound("gate", id)
      } catch (error) {
        own.claimDecision(id) // not written: a decision seen later is someone else's
        // Someone else decided (or the operator resolved it) since it was read.
        if (error instanceof ApiException && (error.code === 409 || error.code === 422)) {
          await refuseDecided((await resources.getGate(id)) ?? gate, resources, true)
        }
        throw error
      }
      audit(gateDecisionEntry(gate, decision, user.actor, pipelineOf(gate)?.metadata?.uid ?? ""))
      ctx.body = gateView(await settled(resources, id, gate))
    })
  }
  return router
}

/** 409 when the gate is no longer waiting for a decision: resolved, decided, or its run ended. */
async function refuseDecided(gate: GateObject, resources: Pick<ResourceClient, "getRun">, raced = false) {
  const id = gate.metadata?.name ?? ""
  if (isFinalGate(gate)) {
    const by = gate.status?.resolvedBy ? ` by ${gate.status.resolvedBy}` : ""
    throw new RunnelError(409, "gate_resolved", `gate "${id}" is already ${gate.status?.phase}${by}`, {
      cause: gate.status,
    })
  }
  if (gate.spec.decision !== undefined) {
    throw new RunnelError(
      409,
      "gate_resolved",
      `gate "${id}" is already ${gate.spec.decision.phase} by ${gate.spec.decision.by || "kubectl"}`,
    )
  }
  const run = await resources.getRun(gate.spec.runRef.name)
  const phase = run?.status?.phase
  if (run === undefined || isFinalRunStatus(phase)) {
    throw new RunnelError(
      409,
      "run_finished",
      `gate "${id}" can no longer be decided: its run ${gate.spec.runRef.name} ${run === undefined ? "is gone" : `ended with status ${phase}`}`,
    )
  }
  if (raced) throw new RunnelError(409, "gate_resolved", `gate "${id}" was decided by someone else meanwhile`)
}

/** The gate once the operator has written the decision into its status, or as it is after resolveWaitMs. */
async function settled(resources: Pick<ResourceClient, "getGate">, id: string, fallback: GateObject) {
  const deadline = Date.now() + resolveWaitMs
  let gate: GateObject | undefined = fallback
  for (let waitMs = 20; Date.now() < deadline; waitMs = Math.min(waitMs * 2, 250)) {
    gate = (await resources.getGate(id)) ?? gate
    if (gate !== undefined && isFinalGate(gate)) return gate
    await new Promise((resolve) => setTimeout(resolve, waitMs))
  }
  return gate ?? fallback
}
