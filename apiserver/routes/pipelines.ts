import { randomBytes } from "node:crypto"
import Router from "@koa/router"
import { badRequest, notFound, RunnelError } from "../../lib/core/errors.ts"
import { objectBody, onlyFields } from "../body.ts"
import {
  findPipeline,
  isResourceName,
  type PipelineResource,
  type PipelineSpec,
  type Resources,
  runnelApiVersion,
} from "../resources.ts"
import { inferContentType, pageOf, paginate, pipelineView, updatedAtAnnotation } from "../views.ts"

export type PipelineRoutesDeps = {
  resources: Pick<
    Resources,
    | "listPipelines"
    | "getPipeline"
    | "createPipeline"
    | "replacePipeline"
    | "patchPipeline"
    | "deletePipeline"
    | "listRuns"
    | "createRun"
    | "deleteRun"
  >
  /** The driver of a pipeline stored without one. */
  defaultDriver: string
  /** The drivers a pipeline may name. */
  allowedDrivers: readonly string[]
  /** Queued Runs beyond which a trigger answers 503. */
  maxQueueSize: number
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
export function pipelineRoutes({ resources, defaultDriver, allowedDrivers, maxQueueSize }: PipelineRoutesDeps): Router {
  const router = new Router()
  const view = (pipeline: PipelineResource) => pipelineView(pipeline, defaultDriver)
  const found = async (key: string) => {
    const pipeline = await findPipeline(resources, key)
    if (pipeline === undefined) throw notFound("pipeline", key)
    return pipeline
  }

  /** The spec a PUT or POST body describes; what the body cannot set (paused, the secret's reference) is kept. */
  const specOf = (body: Record<string, unknown>, previous?: PipelineSpec): PipelineSpec => {
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
    resources.createPipeline({
      apiVersion: runnelApiVersion,
      kind: "Pipeline",
      metadata: { name, annotations: { [updatedAtAnnotation]: new Date().toISOString() } },
      spec,
    })

  router.get("/api/pipelines", async (ctx) => {
    const page = pageOf(ctx.query)
    const pipelines = (await resources.listPipelines()).sort((a, b) =>
      (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""),
    )
    ctx.body = paginate(pipelines.map(view), page)
  })

  router.put("/api/pipelines/:name", async (ctx) => {
    const key = ctx.params.name ?? ""
    const body = objectBody(ctx.state.body, { required: true })
    onlyFields(body, pipelineFields)
    const existing = await findPipeline(resources, key)
    if (existing === undefined) {
      checkName(key)
      ctx.status = 201
      ctx.body = view(await create(key, specOf(body)))
      return
    }
    const metadata = existing.metadata ?? {}
    ctx.body = view(
      await resources.replacePipeline({
        ...existing,
        metadata: {
          ...metadata,
          annotations: { ...metadata.annotations, [updatedAtAnnotation]: new Date().toISOString() },
        },
        spec: specOf(body, existing.spec),
      }),
    )
  })

  router.post("/api/pipelines", async (ctx) => {
    const body = objectBody(ctx.state.body, { required: true })
    onlyFields(body, ["name", ...pipelineFields])
    const { name, ...rest } = body
    if (typeof name !== "string" || name === "") {
      throw badRequest('"name" is required: the pipeline\'s name, for example "build-and-test"')
    }
    checkName(name)
    const spec = specOf(rest)
    if ((await resources.getPipeline(name)) !== undefined) {
      throw new RunnelError(
        409,
        "conflict",
        `pipeline "${name}" already exists; update it with PUT /api/pipelines/${name}`,
      )
    }
    ctx.status = 201
    ctx.body = view(await create(name, spec))
  })

  router.get("/api/pipelines/:name", async (ctx) => {
    ctx.body = view(await found(ctx.params.name ?? ""))
  })

  router.delete("/api/pipelines/:name", async (ctx) => {
    const pipeline = await found(ctx.params.name ?? "")
    const name = pipeline.metadata?.name ?? ""
    await resources.deletePipeline(name)
    // Runs the API created are owned by the Pipeline; Runs created with kubectl may not be.
    const runs = (await resources.listRuns()).filter((run) => run.spec.pipelineRef.name === name)
    await Promise.all(runs.map((run) => resources.deleteRun(run.metadata?.name ?? "")))
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
        metadata: { annotations: { [updatedAtAnnotation]: new Date().toISOString() } },
        spec: { paused } as PipelineSpec,
      })
      if (patched === undefined) throw notFound("pipeline", name)
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
    const pipeline = await found(ctx.params.id ?? "")
    const name = pipeline.metadata?.name ?? ""
    if (pipeline.spec.paused === true) {
      throw new RunnelError(
        409,
        "paused",
        `pipeline "${name}" is paused; unpause it with POST /api/pipelines/${name}/unpause`,
      )
    }
    if (mode === "webhook") {
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
    const queued = (await resources.listRuns()).filter((run) => (run.status?.phase ?? "queued") === "queued").length
    if (queued >= maxQueueSize) {
      throw new RunnelError(
        503,
        "queue_full",
        `the run queue is full (${queued} queued runs, --max-queue-size ${maxQueueSize}); try again once runs have started`,
      )
    }
    const run = await resources.createRun({
      apiVersion: runnelApiVersion,
      kind: "Run",
      metadata: {
        name: newRunId(),
        labels: { "runnel.dev/pipeline": name },
        ownerReferences: [{ apiVersion: runnelApiVersion, kind: "Pipeline", name, uid: pipeline.metadata?.uid ?? "" }],
      },
      spec: { pipelineRef: { name }, trigger: { type: mode, by: "anonymous", args } },
    })
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

/** Sortable by creation (time first), unique without coordination. */
const newRunId = () => `run-${Date.now().toString(36)}-${randomBytes(4).toString("hex")}`
