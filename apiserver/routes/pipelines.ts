import Router from "@koa/router"
import type { Feature } from "../../lib/config/features.ts"
import { badRequest, featureDisabled, notFound, RunnelError } from "../../lib/core/errors.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import {
  type PipelineObject,
  type PipelineSpec,
  type RunTriggerType,
  runnelApiVersion,
  type ScheduleObject,
} from "../../lib/kube/resources.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { pipelineScope, type SecretStore } from "../../lib/secrets/secret-store.ts"
import type { AccessPolicy } from "../access.ts"
import type { AuditEvent, AuditLog } from "../audit.ts"
import { requestUser } from "../auth/authenticate.ts"
import { objectBody, onlyFields } from "../body.ts"
import { checkPipelineName } from "../find-pipeline.ts"
import type { OwnWrites } from "../kubernetes-audit.ts"
import { admitRun, refuseIfPaused } from "../new-run.ts"
import { type PipelineWrite, pipelineFields, pipelineWrite } from "../pipeline-body.ts"
import type { ResourceIndex } from "../resource-index.ts"
import { checked, type RouteAccess } from "../route-access.ts"
import { pageOf, paginate, pipelineView, updatedAtAnnotation } from "../views.ts"
import { simulatedWebhook } from "../webhooks/simulated.ts"
import { webhookRun } from "../webhooks/webhook-run.ts"

export type PipelineRoutesDeps = {
  resources: Pick<
    ResourceClient,
    | "getPipeline"
    | "createPipeline"
    | "replacePipeline"
    | "patchPipeline"
    | "deletePipeline"
    | "createRun"
    | "deleteRun"
    | "putWebhookSecret"
    | "deleteSecret"
    | "list"
    | "deleteSchedule"
  >
  index: Pick<ResourceIndex, "pipelines" | "runs" | "webhookSecrets">
  /** Where pipeline secrets go: written here, never read back through the API. */
  secrets: Pick<SecretStore, "set" | "deleteScope">
  /** Where webhook bodies too large for a Run wait for it. */
  logs: Pick<LogStore, "attach">
  /** The driver of a pipeline stored without one. */
  defaultDriver: string
  /** The drivers a pipeline may name. */
  allowedDrivers: readonly string[]
  /** The enabled features: `webhooks` and `secrets` gate the fields of the same names. */
  features: readonly Feature[]
  /** Queued Runs beyond which a trigger answers 503. */
  maxQueueSize: number
  /** Receives one entry per change a request makes to a pipeline. */
  audit: AuditLog
  /** The writes made here, told apart from kubectl's by the audit of the watch. */
  own: OwnWrites
  /** Who may see which pipeline (lists), and the check in front of each route. */
  policy: Pick<AccessPolicy, "mayView" | "check">
  access: RouteAccess
  /** Under Basic Auth a pipeline takes no rbac_expression (interface.md). */
  authMode: "open" | "basic" | "oauth"
}

const triggerModes = ["manual", "args", "webhook"] as const satisfies readonly RunTriggerType[]
const isTriggerMode = (mode: unknown): mode is (typeof triggerModes)[number] =>
  triggerModes.some((known) => known === mode)

/** Pipelines over the Pipeline resource, and triggers that create Runs (contract.md sections 4 and 7). */
export function pipelineRoutes({
  resources,
  index,
  secrets,
  logs,
  defaultDriver,
  allowedDrivers,
  features,
  maxQueueSize,
  audit,
  own,
  policy,
  access,
  authMode,
}: PipelineRoutesDeps): Router {
  const router = new Router()
  const record = (
    event: AuditEvent,
    pipeline: PipelineObject,
    actor: string,
    extra: { old?: string | null; new?: string | null } = {},
  ) =>
    audit({
      event,
      pipeline: pipeline.metadata?.name ?? "",
      pipeline_id: pipeline.metadata?.uid ?? "",
      actor,
      ...extra,
    })
  /** pipeline.upsert, and pipeline.rbac.update when the expression changed (old and new). */
  const recordUpsert = (stored: PipelineObject, actor: string, previous?: PipelineSpec) => {
    record("pipeline.upsert", stored, actor)
    const before = previous?.rbacExpression ?? null
    const after = stored.spec.rbacExpression ?? null
    if (before !== after) record("pipeline.rbac.update", stored, actor, { old: before, new: after })
  }
  const view = (pipeline: PipelineObject) => pipelineView(pipeline, defaultDriver)

  const rules = { defaultDriver, allowedDrivers, features, rbacExpressions: authMode !== "basic" }
  const newRunDeps = { resources, index, secrets, logs, maxQueueSize }
  /** The parts of a write kept outside the Pipeline: its webhook Secret and its secrets. */
  const storeWriteOnly = async (pipeline: PipelineObject, write: PipelineWrite, previous?: PipelineSpec) => {
    if (write.webhookSecret !== undefined && write.webhookSecret !== "") {
      index.webhookSecrets.observe(await resources.putWebhookSecret(pipeline, write.webhookSecret))
    } else if (write.webhookSecret === "" && previous?.webhookSecretRef !== undefined) {
      await resources.deleteSecret(previous.webhookSecretRef.name)
    }
    if (Object.keys(write.secrets).length > 0) {
      await secrets.set(pipelineScope(pipeline.metadata?.uid ?? ""), write.secrets)
    }
  }

  const create = async (name: string, spec: PipelineSpec) =>
    stored(
      await resources.createPipeline({
        apiVersion: runnelApiVersion,
        kind: "Pipeline",
        metadata: { name, annotations: { [updatedAtAnnotation]: own.stamp(name) } },
        spec,
      }),
    )
  /** A Pipeline this server wrote, in the index at once so the writer's next read sees it. */
  const stored = (pipeline: PipelineObject) => {
    index.pipelines.observe(pipeline)
    return pipeline
  }

  router.get("/api/pipelines", access.user, async (ctx) => {
    const page = pageOf(ctx.query)
    const user = requestUser(ctx)
    const pipelines = index.pipelines
      .list()
      .filter((pipeline) => policy.mayView(user, pipeline))
      .sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""))
    ctx.body = paginate(pipelines.map(view), page)
  })

  router.put("/api/pipelines/:name", access.newPipeline, async (ctx) => {
    const key = ctx.params.name ?? ""
    const body = objectBody(ctx.state.body, { required: true })
    const actor = requestUser(ctx).actor
    const existing = checked.maybePipeline(ctx.state)
    if (existing === undefined) {
      checkPipelineName(key)
      const write = await pipelineWrite(key, body, rules)
      const created = await create(key, write.spec)
      await storeWriteOnly(created, write)
      recordUpsert(created, actor)
      ctx.status = 201
      ctx.body = withNotes(view(created), write)
      return
    }
    const name = existing.metadata?.name ?? key
    const write = await pipelineWrite(name, body, rules, existing.spec)
    // The operator writes the Pipeline's status between our read and our write; a stale
    // resourceVersion (409) is read again and retried a few times before it reaches the client.
    let current = existing
    let replaced: PipelineObject | undefined
    for (let attempt = 1; replaced === undefined; attempt++) {
      const metadata = current.metadata ?? {}
      try {
        replaced = await resources.replacePipeline({
          ...current,
          metadata: {
            ...metadata,
            annotations: { ...metadata.annotations, [updatedAtAnnotation]: own.stamp(name) },
          },
          spec: {
            ...write.spec,
            paused: current.spec.paused,
            webhookSecretRef:
              write.webhookSecret === undefined ? current.spec.webhookSecretRef : write.spec.webhookSecretRef,
          },
        })
      } catch (error) {
        if ((error as { code?: unknown }).code !== 409 || attempt >= 5) throw error
        const again = await resources.getPipeline(name)
        if (again === undefined) throw notFound("pipeline", name)
        current = again
      }
    }
    stored(replaced)
    await storeWriteOnly(replaced, write, current.spec)
    recordUpsert(replaced, actor, existing.spec)
    ctx.body = withNotes(view(replaced), write)
  })

  router.post("/api/pipelines", access.user, async (ctx) => {
    const body = objectBody(ctx.state.body, { required: true })
    onlyFields(body, ["name", ...pipelineFields])
    const { name, ...rest } = body
    if (typeof name !== "string" || name === "") {
      throw badRequest('"name" is required: the pipeline\'s name, for example "build-and-test"')
    }
    checkPipelineName(name)
    const write = await pipelineWrite(name, rest, rules)
    const user = requestUser(ctx)
    const existing = await resources.getPipeline(name)
    if (existing !== undefined) {
      // One the user may not see is refused as its own paths are, not named as taken.
      policy.check(user, { pipeline: existing })
      throw new RunnelError(
        409,
        "conflict",
        `pipeline "${name}" already exists; update it with PUT /api/pipelines/${name}`,
      )
    }
    const created = await create(name, write.spec)
    await storeWriteOnly(created, write)
    recordUpsert(created, user.actor)
    ctx.status = 201
    ctx.body = withNotes(view(created), write)
  })

  router.get("/api/pipelines/:name", access.pipeline, async (ctx) => {
    ctx.body = view(checked.pipeline(ctx.state))
  })

  router.delete("/api/pipelines/:name", access.pipeline, async (ctx) => {
    const pipeline = checked.pipeline(ctx.state)
    const name = pipeline.metadata?.name ?? ""
    own.deleting(pipeline.metadata?.uid ?? "")
    await resources.deletePipeline(name)
    index.pipelines.forget(pipeline)
    // Its webhook Secret is owned by it and goes with it; the secrets in the store are removed here.
    await secrets.deleteScope(pipelineScope(pipeline.metadata?.uid ?? ""))
    record("pipeline.delete", pipeline, requestUser(ctx).actor)
    // Runs the API created are owned by the Pipeline; Runs created with kubectl may not be.
    const { items: runs } = index.runs.page({ pipeline: name }, 0, Number.MAX_SAFE_INTEGER)
    await Promise.all(
      runs.map(async (run) => {
        await resources.deleteRun(run.metadata?.name ?? "")
        index.runs.forget(run)
      }),
    )
    // Schedules applied with kubectl name the pipeline without being owned by it: they go too.
    const schedules = await resources.list<ScheduleObject>("schedules")
    for (const schedule of schedules.items) {
      if (schedule.spec.pipelineRef.name === name) await resources.deleteSchedule(schedule.metadata?.name ?? "")
    }
    ctx.status = 204
  })

  for (const [action, paused] of [
    ["pause", true],
    ["unpause", false],
  ] as const) {
    router.post(`/api/pipelines/:id/${action}`, access.pipeline, async (ctx) => {
      const pipeline = checked.pipeline(ctx.state)
      const name = pipeline.metadata?.name ?? ""
      const patched = await resources.patchPipeline(name, {
        metadata: { annotations: { [updatedAtAnnotation]: own.stamp(name) } },
        spec: { paused } as PipelineSpec,
      })
      if (patched === undefined) throw notFound("pipeline", name)
      stored(patched)
      record(paused ? "pipeline.paused" : "pipeline.unpaused", patched, requestUser(ctx).actor)
      ctx.body = view(patched)
    })
  }

  router.post("/api/pipelines/:id/trigger", access.pipeline, async (ctx) => {
    const body = objectBody(ctx.state.body, { required: false })
    onlyFields(body, ["mode", "args", "webhook"])
    const mode = body.mode ?? "manual"
    if (!isTriggerMode(mode)) {
      throw badRequest(`"mode" ${JSON.stringify(mode)} is not a trigger mode; known: ${triggerModes.join(", ")}`)
    }
    const args = body.args ?? []
    if (!Array.isArray(args) || args.some((arg) => typeof arg !== "string")) {
      throw badRequest('"args" must be an array of strings, for example ["--fast", "main"]')
    }
    if (mode === "webhook") {
      if (!features.includes("webhooks")) {
        throw featureDisabled("webhooks")
      }
      const request = simulatedWebhook(body.webhook)
      const pipeline = checked.pipeline(ctx.state)
      const name = pipeline.metadata?.name ?? ""
      if (pipeline.spec.webhookSecretRef === undefined) {
        throw new RunnelError(
          403,
          "forbidden",
          `pipeline "${name}" has no webhook_secret; a webhook-mode trigger needs one`,
        )
      }
      refuseIfPaused(pipeline)
      const run = await admitRun(
        newRunDeps,
        pipeline,
        webhookRun({ ...request, url: `/api/webhooks/${name}` }, requestUser(ctx).actor),
      )
      ctx.status = 202
      ctx.body = { run_id: run.metadata?.name }
      return
    }
    if (body.webhook !== undefined) throw badRequest('"webhook" is given only with mode "webhook"')
    const pipeline = checked.pipeline(ctx.state)
    refuseIfPaused(pipeline)
    const run = await admitRun(newRunDeps, pipeline, { type: mode, args, by: requestUser(ctx).actor })
    ctx.status = 202
    ctx.body = { run_id: run.metadata?.name }
  })

  return router
}

/** A stored pipeline's view with what the check noted (only on the answer to a store, and only when there is something). */
function withNotes<T extends object>(view: T, write: PipelineWrite): T | (T & { notes: readonly string[] }) {
  return write.notes.length === 0 ? view : { ...view, notes: write.notes }
}
