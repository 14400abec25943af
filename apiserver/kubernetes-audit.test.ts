import { describe, expect, it } from "vitest"
import { changedByAnnotation, type PipelineObject } from "../lib/kube/resources.ts"
import type { AuditEntry, LoginAuditEntry } from "./audit.ts"
import { auditForeignChanges, OwnWrites } from "./kubernetes-audit.ts"

const pipeline = (annotations: Record<string, string>): PipelineObject => ({
  apiVersion: "runnel.dev/v1alpha1",
  kind: "Pipeline",
  metadata: { name: "p", uid: "u1", annotations },
  spec: { content: "x" },
})

function audited(authorAnnotation: string | undefined, object: PipelineObject): (AuditEntry | LoginAuditEntry)[] {
  const entries: (AuditEntry | LoginAuditEntry)[] = []
  const handlers = auditForeignChanges((entry) => entries.push(entry), new OwnWrites(), authorAnnotation)
  handlers.changed?.(undefined, object)
  handlers.deleted?.(object)
  return entries
}

describe("the audit of changes made through the Kubernetes API", () => {
  it("names the user the embedded API recorded on the object", () => {
    const entries = audited(changedByAnnotation, pipeline({ [changedByAnnotation]: "github:alice" }))
    expect(entries.map(({ event, actor }) => ({ event, actor }))).toEqual([
      { event: "pipeline.upsert", actor: "github:alice" },
      { event: "pipeline.delete", actor: "github:alice" },
    ])
  })

  it("ignores the annotation where the API does not set it itself (a cluster), and says kubernetes", () => {
    const entries = audited(undefined, pipeline({ [changedByAnnotation]: "github:forged" }))
    expect(entries.map(({ actor }) => actor)).toEqual(["kubernetes", "kubernetes"])
  })

  it("says kubernetes when the embedded API recorded no user (open access, runnel's own writes)", () => {
    expect(audited(changedByAnnotation, pipeline({})).map(({ actor }) => actor)).toEqual(["kubernetes", "kubernetes"])
  })
})
