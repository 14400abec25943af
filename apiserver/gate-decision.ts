import { notFound, RunnelError } from "../lib/core/errors.ts"
import { isFinalRunStatus } from "../lib/core/status.ts"
import { ApiException } from "../lib/kube/client-node.js"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import { type GateDecision, type GateObject, gateCreatedAt, isFinalGate } from "../lib/kube/resources.ts"
import { type AuditLog, gateDecisionEntry } from "./audit.ts"
import type { OwnWrites } from "./kubernetes-audit.ts"
import type { ResourceIndex } from "./resource-index.ts"
import { gatePipeline } from "./route-access.ts"

export type GateDecisionDeps = {
  resources: Pick<ResourceClient, "getRun" | "getGate" | "decideGate">
  index: Pick<ResourceIndex, "pipelines">
  audit: AuditLog
  /** Decisions this server writes, so the audit of the watch leaves them to the one who wrote them. */
  own: Pick<OwnWrites, "deciding" | "claimDecision">
}

/** How long a decision waits for the operator to write it into the gate's status. */
const resolveWaitMs = 5_000

/** The gate object of contract.md section 4, plus the approver's comment and the timeout. */
export function gateView(gate: GateObject) {
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

/**
 * Writes a decision on `gate` by `decision.by`, who may decide it (AccessPolicy, checked by the
 * caller), audits it, and answers the gate once the operator has resolved it. REST and MCP decide
 * through here alike; `via` names MCP in the audit entry. 409 when the gate no longer waits.
 */
export async function decideGate(
  deps: GateDecisionDeps,
  gate: GateObject,
  decision: GateDecision & { by: string },
  via?: "mcp",
): Promise<GateObject> {
  const { resources, own } = deps
  const id = gate.metadata?.name ?? ""
  await refuseDecided(gate, resources)
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
  const entry = gateDecisionEntry(gate, decision, decision.by, gatePipeline(deps.index, gate)?.metadata?.uid ?? "")
  deps.audit(via === undefined ? entry : { ...entry, via })
  return settled(resources, id, gate)
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
