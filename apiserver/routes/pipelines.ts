import Router from "@koa/router"
import { badRequest, notFound, RunnelError } from "../../lib/core/errors.ts"
import { inferContentType } from "../../lib/script/content-type.ts"
import { scriptProblem } from "../../lib/script/pipeline-check.ts"
import { type AuditEvent, type AuditLog, anonymousActor } from "../audit.ts"
import { objectBody, onlyFields } from "../body.ts"
import type { OwnWrites } from "../kubernetes-audit.ts"
import { createRun } from "../new-run.ts"
import type { ResourceIndex } from "../resource-index.ts"
import {
  findPipeline,
  isResourceName,
  type PipelineResource,
  type PipelineSpec,
  type Resources,
  runnelApiVersion,
} from "../resources.ts"
import { pageOf, paginate, pipelineView, updatedAtAnnotation } from "../views.ts"

export type PipelineRoutesDeps = {
  resources: Pick<
    Resources,
    | "getPipeline"
    | "createPipeline"
    | "replacePipeline"
    | "patchPipeline"
    | "deletePipeline"
    | "createRun"
    | "deleteRun"
  >
  index: Pick<ResourceIndex, "pipelines" | "runs">
  /** The driver of a pipeline stored without one. */
  defaultDriver: string
  /** The drivers a pipeline may name. */
  allowedDrivers: readonly string[]
  /** Queued Runs beyond which a trigger answers 503. */
  maxQueueSize: number
  /** Receives one entry per change a request makes to a pipeline. */
  audit: AuditLog
  /** The writes made here, told apart from kubectl's by the audit of the watch. */
  own: OwnWrites
}

const pipelineFields = [
  "content",
  "content_type",
  "driver",
  "driver_config",
  "webhook_secret",
  "rbac_expression",
  "secrets",
]
const triggerModes = ["manual", "args", "webhook"]

/** Pipelines over the Pipeline resource, and triggers that create Runs (contract.md sections 4 and 7). */
export function pipelineRoutes({
  resources,
  index,
  defaultDriver,
  allowedDrivers,
  maxQueueSize,
  audit,
  own,
}: PipelineRoutesDeps): Router {
  const router = new Router()
  const record = (
    event: AuditEvent,
    pipeline: PipelineResource,
    extra: { old?: string | null; new?: string | null } = {},
  ) =>
    audit({
      event,
      pipeline: pipeline.metadata?.name ?? "",
      pipeline_id: pipeline.metadata?.uid ?? "",
      actor: anonymousActor,
      ...extra,
    })
  /** pipeline.upsert, and pipeline.rbac.update when the expression changed (old and new). */
  const recordUpsert = (stored: PipelineResource, previous?: PipelineSpec) => {
    record("pipeline.upsert", stored)
    const before = previous?.rbacExpression ?? null
    const after = stored.spec.rbacExpression ?? null
    if (before !== after) record("pipeline.rbac.update", stored, { old: before, new: after })
  }
  const view = (pipeline: PipelineResource) => pipelineView(pipeline, defaultDriver)
  const found = async (key: string) => {
    const pipeline = await findPipeline(resources, index.pipelines, key)
    if (pipeline === undefined) throw notFound("pipeline", key)
    return pipeline
  }

  /** The spec a PUT or POST body describes; what the body cannot set (paused, the secret's reference) is kept. */
  const specOf = async (
    name: string,
    body: Record<string, unknown>,
    previous?: PipelineSpec,
  ): Promise<PipelineSpec> => {
    if (body.webhook_secret !== undefined && body.webhook_secret !== null) {
      throw badRequest(
        "webhook_secret is not stored by this version of runnel yet (webhooks arrive later); store the pipeline without it",
      )
    }
    if (body.secrets !== undefined && body.secrets !== null) {
      throw badRequest(
        "pipeline secrets are not stored by this version of runnel yet; store the pipeline without secrets and give runs global secrets with the server's --secret",
      )
    }
    const content = body.content
    if (typeof content !== "string" || content.trim() === "") {
      throw badRequest('"content" is required: the pipeline\'s source text, a non-empty string')
    }
    const spec: PipelineSpec = {
      content,
      contentType: contentTypeOf(body.content_type, content),
      driver: driverOf(body.driver),
    }
    const driverConfig = body.driver_config
    if (driverConfig !== undefined && driverConfig !== null) {
      if (typeof driverConfig !== "object" || Array.isArray(driverConfig)) {
        throw badRequest('"driver_config" must be a JSON object, for example {"host": "unix:///var/run/docker.sock"}')
      }
      spec.driverConfig = driverConfig as Record<string, unknown>
    }
    const rbac = body.rbac_expression
    if (rbac !== undefined && rbac !== null && rbac !== "") {
      if (typeof rbac !== "string") throw badRequest('"rbac_expression" must be a string (a CEL expression)')
      spec.rbacExpression = rbac
    }
    if (spec.contentType !== "yaml") {
      // Refused at store time with the compiler's message, so a broken script never reaches a run.
      const problem = await scriptProblem(name, spec.contentType ?? "ts", content)
      if (problem !== undefined) throw badRequest(problem)
    }
    if (previous?.paused === true) spec.paused = true
    if (previous?.webhookSecretRef !== undefined) spec.webhookSecretRef = previous.webhookSecretRef
    return spec
  }

  const driverOf = (driver: unknown): string => {
    if (driver === undefined || driver === null || driver === "") return defaultDriver
    if (typeof driver !== "string") throw badRequest('"driver" must be a string, the name of a driver')
    if (!allowedDrivers.includes(driver)) {
      throw badRequest(`driver "${driver}" is not allowed on this server; allowed: ${allowedDrivers.join(", ")}`)
    }
    return driver
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
  const stored = (pipeline: PipelineResource) => {
    index.pipelines.observe(pipeline)
    return pipeline
  }

  router.get("/api/pipelines", async (ctx) => {
    const page = pageOf(ctx.query)
    const pipelines = index.pipelines
      .list()
      .sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""))
    ctx.body = paginate(pipelines.map(view), page)
  })

  router.put("/api/pipelines/:name", async (ctx) => {
    const key = ctx.params.name ?? ""
    const body = objectBody(ctx.state.body, { required: true })
    onlyFields(body, pipelineFields)
    const existing = await findPipeline(resources, index.pipelines, key)
    if (existing === undefined) {
      checkName(key)
      const created = await create(key, await specOf(key, body))
      recordUpsert(created)
      ctx.status = 201
      ctx.body = view(created)
      return
    }
    const name = existing.metadata?.name ?? key
    const spec = await specOf(name, body, existing.spec)
    // The operator writes the Pipeline's status between our read and our write; a stale
    // resourceVersion (409) is read again and retried a few times before it reaches the client.
    let current = existing
    let replaced: PipelineResource | undefined
    for (let attempt = 1; replaced === undefined; attempt++) {
      const metadata = current.metadata ?? {}
      try {
        replaced = await resources.replacePipeline({
          ...current,
          metadata: {
            ...metadata,
            annotations: { ...metadata.annotations, [updatedAtAnnotation]: own.stamp(name) },
          },
          spec: { ...spec, paused: current.spec.paused, webhookSecretRef: current.spec.webhookSecretRef },
        })
      } catch (error) {
        if ((error as { code?: unknown }).code !== 409 || attempt >= 5) throw error
        const again = await resources.getPipeline(name)
        if (again === undefined) throw notFound("pipeline", name)
        current = again
      }
    }
    stored(replaced)
    recordUpsert(replaced, existing.spec)
    ctx.body = view(replaced)
  })

  router.post("/api/pipelines", async (ctx) => {
    const body = objectBody(ctx.state.body, { required: true })
    onlyFields(body, ["name", ...pipelineFields])
    const { name, ...rest } = body
    if (typeof name !== "string" || name === "") {
      throw badRequest('"name" is required: the pipeline\'s name, for example "build-and-test"')
    }
    checkName(name)
    const spec = await specOf(name, rest)
    if ((await resources.getPipeline(name)) !== undefined) {
      throw new RunnelError(
        409,
        "conflict",
        `pipeline "${name}" already exists; update it with PUT /api/pipelines/${name}`,
      )
    }
    const created = await create(name, spec)
    recordUpsert(created)
    ctx.status = 201
    ctx.body = view(created)
  })

  router.get("/api/pipelines/:name", async (ctx) => {
    ctx.body = view(await found(ctx.params.name ?? ""))
  })

  router.delete("/api/pipelines/:name", async (ctx) => {
    const pipeline = await found(ctx.params.name ?? "")
    const name = pipeline.metadata?.name ?? ""
    own.deleting(pipeline.metadata?.uid ?? "")
    await resources.deletePipeline(name)
    index.pipelines.forget(pipeline)
    record("pipeline.delete", pipeline)
    // Runs the API created are owned by the Pipeline; Runs created with kubectl may not be.
    const { items: runs } = index.runs.page({ pipeline: name }, 0, Number.MAX_SAFE_INTEGER)
    await Promise.all(
      runs.map(async (run) => {
        await resources.deleteRun(run.metadata?.name ?? "")
        index.runs.forget(run)
      }),
    )
    ctx.status = 204
  })

  for (const [action, paused] of [
    ["pause", true],
    ["unpause", false],
  ] as const) {
    router.post(`/api/pipelines/:id/${action}`, async (ctx) => {
      const pipeline = await found(ctx.params.id ?? "")
      const name = pipeline.metadata?.name ?? ""
      const patched = await resources.patchPipeline(name, {
        metadata: { annotations: { [updatedAtAnnotation]: own.stamp(name) } },
        spec: { paused } as PipelineSpec,
      })
      if (patched === undefined) throw notFound("pipeline", name)
      stored(patched)
      record(paused ? "pipeline.paused" : "pipeline.unpaused", patched)
      ctx.body = view(patched)
    })
  }

  router.post("/api/pipelines/:id/trigger", async (ctx) => {
    const body = objectBody(ctx.state.body, { required: false })
    onlyFields(body, ["mode", "args", "webhook"])
    const mode = body.mode ?? "manual"
    if (typeof mode !== "string" || !triggerModes.includes(mode)) {
      throw badRequest(`"mode" ${JSON.stringify(mode)} is not a trigger mode; known: ${triggerModes.join(", ")}`)
    }
    const args = body.args ?? []
    if (!Array.isArray(args) || args.some((arg) => typeof arg !== "string")) {
      throw badRequest('"args" must be an array of strings, for example ["--fast", "main"]')
    }
    if (mode === "webhook") {
      const pipeline = await found(ctx.params.id ?? "")
      const name = pipeline.metadata?.name ?? ""
      if (pipeline.spec.webhookSecretRef === undefined) {
        throw new RunnelError(
          403,
          "forbidden",
          `pipeline "${name}" has no webhook_secret; a webhook-mode trigger needs one`,
        )
      }
      throw new RunnelError(
        501,
        "not_implemented",
        "webhook-mode triggers arrive with runnel's webhooks; use mode manual or args",
      )
    }
    const run = await createRun({ resources, index, maxQueueSize }, ctx.params.id ?? "", { type: mode, args })
    ctx.status = 202
    ctx.body = { run_id: run.metadata?.name }
  })

  return router
}

function checkName(name: string): void {
  if (!isResourceName(name)) {
    throw badRequest(
      `pipeline name "${name}" is not valid: use lowercase letters, digits, "-" and ".", start and end with a letter or digit, at most 63 characters`,
    )
  }
}

function contentTypeOf(given: unknown, content: string): NonNullable<PipelineSpec["contentType"]> {
  if (given === undefined || given === null || given === "") return inferContentType(content)
  if (given === "ts" || given === "js" || given === "yaml") return given
  if (given === "yml") return "yaml"
  throw badRequest(`"content_type" ${JSON.stringify(given)} is not known; use ts, js or yaml (yml)`)
}
