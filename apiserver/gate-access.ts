import { compileExpression } from "../lib/cel/expression.ts"
import { notFound, RunnelError } from "../lib/core/errors.ts"
import type { GateObject, PipelineObject } from "../lib/kube/resources.ts"
import type { RequestUser } from "./auth/user.ts"

/**
 * Whether `user` may approve or reject `gate` of `pipeline`, the one place
 * that decides: "hidden" when the user may not see the pipeline (its RBAC
 * expression; the caller answers 404, so a gate's existence does not leak),
 * "forbidden" with the reason when the gate's `approvers` expression does not
 * match the user (403), else "allowed". In open access the pipeline's RBAC
 * does not apply, but a gate's approvers still do: an anonymous user matches
 * only an expression that holds for empty fields, and such a gate is then
 * approved through the Kubernetes API (`kubectl patch`), whose own RBAC applies.
 */
export function gateAccess(
  user: RequestUser,
  gate: GateObject,
  pipeline: PipelineObject | undefined,
): "hidden" | { forbidden: string } | "allowed" {
  const rbac = pipeline?.spec.rbacExpression
  if (user.authenticated && rbac !== undefined && rbac !== "" && !compileExpression("rbac", rbac).evaluate(user)) {
    return "hidden"
  }
  const approvers = gate.spec.approvers
  if (approvers !== undefined && approvers !== "" && !compileExpression("rbac", approvers).evaluate(user)) {
    const how = user.authenticated
      ? ""
      : `; this server has no authentication, so decide it with kubectl patch gate ${gate.metadata?.name} --type merge -p '{"spec":{"decision":{"phase":"approved","by":"NAME"}}}'`
    return { forbidden: `gate "${gate.spec.name}" may be decided only by users matching ${approvers}${how}` }
  }
  return "allowed"
}

/** Throws what gateAccess decided against, as the error renderer answers it. */
export function checkGateAccess(user: RequestUser, gate: GateObject, pipeline: PipelineObject | undefined): void {
  const access = gateAccess(user, gate, pipeline)
  if (access === "hidden") throw notFound("gate", gate.metadata?.name ?? "")
  if (access !== "allowed") throw new RunnelError(403, "forbidden", access.forbidden)
}
