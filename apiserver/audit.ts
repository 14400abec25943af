import { type GateDecision, type GateObject, pipelineLabel } from "../lib/kube/resources.ts"

/** The audit events of interface.md (Authentication: audit log). */
export type AuditEvent =
  | "pipeline.upsert"
  | "pipeline.delete"
  | "pipeline.paused"
  | "pipeline.unpaused"
  | "pipeline.rbac.update"
  | "run.trigger"
  | "run.stop"
  | "gate.approved"
  | "gate.rejected"

/**
 * One audit entry: who changed which pipeline. `actor` is `<provider>:<user>`,
 * or `anonymous` in open access. `pipeline.rbac.update` adds `old` and `new`.
 */
export type AuditEntry = {
  readonly event: AuditEvent
  readonly pipeline: string
  readonly pipeline_id: string
  readonly actor: string
  readonly old?: string | null
  readonly new?: string | null
  /** `gate.*`: the gate's id, its run and the approver's comment; `run.*`: the run started or stopped. */
  readonly gate?: string
  readonly run?: string
  readonly comment?: string
  /** Where the request came from when not the REST API: `mcp`. */
  readonly via?: string
}

/**
 * A login (interface.md "Audit"): `auth.login` (browser), `auth.login_failed`
 * (with why, never a code, token or password), `auth.device_approved` (a
 * logged-in person gave `runnel login` a token). `address` is the client's.
 */
export type LoginAuditEntry = {
  readonly event: "auth.login" | "auth.login_failed" | "auth.device_approved"
  readonly actor: string
  /** The provider's path segment: github, gitlab, microsoftonline. */
  readonly provider: string
  readonly address: string
  readonly via?: "browser" | "device"
  readonly reason?: string
}

/** Where audit entries go; `runnel server` writes each as one JSON line on stdout (docs/decisions.md). */
export type AuditLog = (entry: AuditEntry | LoginAuditEntry) => void

/** The actor of a request in open access, where no user is asked for. */
export const anonymousActor = "anonymous"

/** The actor of a change made through the Kubernetes API rather than this API server. */
export const kubernetesActor = "kubernetes"

/** `gate.approved` or `gate.rejected`: one gate's decision, whoever made it and however it arrived. */
export function gateDecisionEntry(
  gate: GateObject,
  decision: GateDecision,
  actor: string,
  pipelineId: string,
): AuditEntry {
  return {
    event: decision.phase === "approved" ? "gate.approved" : "gate.rejected",
    pipeline: gate.metadata?.labels?.[pipelineLabel] ?? "",
    pipeline_id: pipelineId,
    actor,
    gate: gate.metadata?.name ?? "",
    run: gate.spec.runRef.name,
    ...(decision.comment === undefined ? {} : { comment: decision.comment }),
  }
}
