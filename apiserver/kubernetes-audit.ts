import { isDeepStrictEqual } from "node:util"
import type { KubernetesObject } from "../lib/kube/client-node.js"
import { type GateObject, type PipelineObject, type PipelineSpec, pipelineLabel } from "../lib/kube/resources.ts"
import { type AuditEntry, type AuditLog, gateDecisionEntry, kubernetesActor } from "./audit.ts"
import type { IndexHandlers } from "./resource-index.ts"
import { updatedAtAnnotation } from "./views.ts"

/** Writes remembered at most; one whose watch event never came (a relist skipped it) is dropped in time. */
const rememberedLimit = 10_000

/**
 * The Pipeline writes this API server makes, so that the watch can tell them
 * from changes made with kubectl or any other client. A write is known by
 * the `runnel.dev/updated-at` stamp it sets, registered before the write is
 * sent (its watch event may arrive before its response); a delete by the uid.
 */
export class OwnWrites {
  readonly #stamps = new Map<string, number>()
  readonly #deletes = new Set<string>()
  readonly #decisions = new Set<string>()

  /** The updated-at stamp for a write of pipeline `name` about to be sent. */
  stamp(name: string): string {
    const stamp = new Date().toISOString()
    const key = `${name}@${stamp}`
    this.#stamps.set(key, (this.#stamps.get(key) ?? 0) + 1)
    if (this.#stamps.size > rememberedLimit) this.#stamps.delete(this.#stamps.keys().next().value as string)
    return stamp
  }

  deleting(uid: string): void {
    this.#deletes.add(uid)
    if (this.#deletes.size > rememberedLimit) this.#deletes.delete(this.#deletes.values().next().value as string)
  }

  /** True, once, for the watch event of a write stamped here. */
  claimWrite(pipeline: PipelineObject): boolean {
    const key = `${pipeline.metadata?.name ?? ""}@${pipeline.metadata?.annotations?.[updatedAtAnnotation] ?? ""}`
    const count = this.#stamps.get(key)
    if (count === undefined) return false
    if (count > 1) this.#stamps.set(key, count - 1)
    else this.#stamps.delete(key)
    return true
  }

  claimDelete(uid: string): boolean {
    return this.#deletes.delete(uid)
  }

  /** A decision on gate `name` about to be written by this server (it audits it itself). */
  deciding(name: string): void {
    this.#decisions.add(name)
    if (this.#decisions.size > rememberedLimit) this.#decisions.delete(this.#decisions.values().next().value as string)
  }

  claimDecision(name: string): boolean {
    return this.#decisions.delete(name)
  }
}

/**
 * Audit entries for the Pipeline changes others make through the Kubernetes
 * API (`kubectl apply`, `edit`, `patch`, `delete`), as the index's watch sees
 * them: the actor is the user the API recorded in `authorAnnotation` (runnel
 * server's embedded API, which authenticated them: `github:octocat`), else
 * `kubernetes`, or `kubernetes:<field manager>` where the API records one (a
 * cluster's managedFields name the client, not the user). Status changes (the
 * operator's Ready condition) are no change of the pipeline.
 */
export function auditForeignChanges(
  audit: AuditLog,
  own: OwnWrites,
  authorAnnotation?: string,
): IndexHandlers<PipelineObject> {
  const entry = (event: AuditEntry["event"], pipeline: PipelineObject, extra: Partial<AuditEntry> = {}) =>
    audit({
      event,
      pipeline: pipeline.metadata?.name ?? "",
      pipeline_id: pipeline.metadata?.uid ?? "",
      actor: actorOf(pipeline, authorAnnotation),
      ...extra,
    })
  return {
    changed(before, after) {
      if (own.claimWrite(after)) return
      const previous = before?.metadata?.uid === after.metadata?.uid ? before?.spec : undefined
      const { paused: wasPaused = false, rbacExpression: oldRbac, ...oldRest } = previous ?? ({} as PipelineSpec)
      const { paused = false, rbacExpression: newRbac, ...newRest } = after.spec
      if (previous === undefined || !isDeepStrictEqual(oldRest, newRest)) entry("pipeline.upsert", after)
      if (previous !== undefined && wasPaused !== paused) {
        entry(paused ? "pipeline.paused" : "pipeline.unpaused", after)
      }
      if ((oldRbac ?? null) !== (newRbac ?? null)) {
        entry("pipeline.rbac.update", after, { old: oldRbac ?? null, new: newRbac ?? null })
      }
    },
    deleted(pipeline) {
      if (!own.claimDelete(pipeline.metadata?.uid ?? "")) entry("pipeline.delete", pipeline)
    },
  }
}

/**
 * Audit entries for gate decisions made through the Kubernetes API
 * (`kubectl patch gate … spec.decision`), as the watch sees them; decisions
 * this server wrote are audited by its route, with the request's user.
 */
export function auditForeignDecisions(
  audit: AuditLog,
  own: OwnWrites,
  pipelineId: (name: string) => string,
  authorAnnotation?: string,
): IndexHandlers<GateObject> {
  return {
    changed(before, after) {
      const decision = after.spec.decision
      if (decision === undefined || before?.spec.decision !== undefined) return
      const name = after.metadata?.name ?? ""
      if (own.claimDecision(name)) return
      const pipeline = after.metadata?.labels?.[pipelineLabel] ?? ""
      audit(gateDecisionEntry(after, decision, actorOf(after, authorAnnotation), pipelineId(pipeline)))
    },
  }
}

/**
 * Who made the newest write to the object itself (not its status): the user the API recorded in
 * `authorAnnotation`, else the field manager a cluster records.
 */
function actorOf(object: KubernetesObject, authorAnnotation: string | undefined): string {
  const author = authorAnnotation === undefined ? undefined : object.metadata?.annotations?.[authorAnnotation]
  if (author !== undefined && author !== "") return author
  const writes = (object.metadata?.managedFields ?? []).filter((entry) => entry.subresource === undefined)
  const newest = writes.sort((a, b) => String(b.time ?? "").localeCompare(String(a.time ?? "")))[0]
  return newest?.manager === undefined ? kubernetesActor : `${kubernetesActor}:${newest.manager}`
}
