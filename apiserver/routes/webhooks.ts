import type { ServerResponse } from "node:http"
import Router from "@koa/router"
import type { Context } from "koa"
import type { Feature } from "../../lib/config/features.ts"
import { featureDisabled, notFound, RunnelError } from "../../lib/core/errors.ts"
import { isFinalRunStatus } from "../../lib/core/status.ts"
import { type ResourceClient, webhookSecretIn } from "../../lib/kube/resource-client.ts"
import type { RunObject, RunWebhookResponse } from "../../lib/kube/resources.ts"
import type { ApiMetrics, WebhookOutcome } from "../../lib/metrics/metrics.ts"
import { rawBody } from "../body.ts"
import { findPipeline } from "../find-pipeline.ts"
import { admitRun, type NewRunDeps, refuseIfPaused } from "../new-run.ts"
import type { ResourceIndex } from "../resource-index.ts"
import type { RouteAccess } from "../route-access.ts"
import { detectProvider, providerOf, verifyWithWatchedSecret } from "../webhooks/providers.ts"
import { webhookRun } from "../webhooks/webhook-run.ts"

export type WebhookRoutesDeps = NewRunDeps & {
  resources: Pick<ResourceClient, "webhookSecret">
  /** Its webhook Secrets, read before the Secret itself is. */
  index: Pick<ResourceIndex, "webhookSecrets">
  features: readonly Feature[]
  /** Larger bodies answer 413. */
  maxBodyBytes: number
  /** How long a request waits for the pipeline's `http.respond()` before it gets 202. */
  webhookTimeoutMs: number
  /** Slack and Stripe timestamps further than this from now are refused as replays. */
  webhookMaxAgeMs: number
  access: Pick<RouteAccess, "signature">
  /** Each delivery's provider and outcome, for monitoring; nothing is recorded without it. */
  metrics?: Pick<ApiMetrics, "webhookDelivered">
}

/** The outcome of a refused delivery, by the refusal's code; any other 4xx is `refused`, a 5xx `error`. */
const refusals: Readonly<Record<string, WebhookOutcome>> = {
  unauthorized: "rejected-signature",
  not_found: "unknown-pipeline",
  paused: "paused",
  feature_disabled: "feature-disabled",
  too_large: "too-large",
  queue_full: "queue-full",
  webhook_secret_missing: "secret-unavailable",
}

const outcomeOf = (error: unknown): WebhookOutcome =>
  error instanceof RunnelError ? (refusals[error.code] ?? (error.status < 500 ? "refused" : "error")) : "error"

/** Response headers the server sets itself; a pipeline's own would contradict the body it sends. */
const serverHeaders = new Set(["content-length", "transfer-encoding", "connection", "keep-alive"])

/**
 * Incoming webhooks (interface.md, Webhook trigger): any method, the raw body
 * kept byte for byte, the provider detected and its signature verified, and a
 * Run created before anything is answered. The answer is the pipeline's own
 * `http.respond()` as soon as the Run carries it, else 202 `{run_id}` when
 * the run ends without one or --webhook-timeout passes.
 */
export function webhookRoutes(deps: WebhookRoutesDeps): Router {
  const router = new Router()

  const { metrics } = deps
  router.all("/api/webhooks/:pipeline_id", deps.access.signature, async (ctx) => {
    if (metrics === undefined) {
      await deliver(ctx)
      return
    }
    // The provider by its headers, read again here so that a refusal before detection is labelled too.
    try {
      metrics.webhookDelivered(providerOf(ctx.req).name, await deliver(ctx))
    } catch (error) {
      metrics.webhookDelivered(providerOf(ctx.req).name, outcomeOf(error))
      throw error
    }
  })

  /** Verifies the delivery, creates its Run and answers; resolves with how it was answered. */
  async function deliver(ctx: Context): Promise<"accepted" | "answered"> {
    if (!deps.features.includes("webhooks")) {
      throw featureDisabled("webhooks")
    }
    const body = await rawBody(ctx.req, ctx.get("Content-Length"), deps.maxBodyBytes)
    const key = ctx.params.pipeline_id ?? ""
    // The watched index first, as the operator reads its informer: a GET per delivery was one of the
    // embedded API's requests per webhook run. A Pipeline the watch has not brought yet is read.
    const pipeline = deps.index.pipelines.get(key) ?? (await findPipeline(deps.resources, deps.index.pipelines, key))
    if (pipeline === undefined) throw notFound("pipeline", key)
    refuseIfPaused(pipeline)
    const request = { method: ctx.method, headers: ctx.req.headers, rawBody: body, query: ctx.query, url: ctx.url }
    const { provider } = detectProvider(request)
    const watched = deps.index.webhookSecrets.get(pipeline.spec.webhookSecretRef?.name ?? "")
    const verdict = await verifyWithWatchedSecret(
      request,
      provider,
      webhookSecretIn(pipeline, watched),
      () => deps.resources.webhookSecret(pipeline),
      { now: new Date(), maxAgeMs: deps.webhookMaxAgeMs },
    )
    if (!verdict.ok) throw new RunnelError(401, "unauthorized", verdict.message)
    const run = await admitRun(deps, pipeline, webhookRun(request, provider))
    return answer(ctx, run, deps)
  }

  return router
}

/** The pipeline's response when it gives one in time, else 202 with the run's id. */
async function answer(ctx: Context, run: RunObject, deps: WebhookRoutesDeps): Promise<"accepted" | "answered"> {
  const id = run.metadata?.name ?? ""
  const response = await responseOf(id, deps, ctx.res)
  if (response === undefined) {
    ctx.status = 202
    ctx.body = { run_id: id }
    return "accepted"
  }
  ctx.status = response.status
  for (const [name, value] of Object.entries(response.headers ?? {})) {
    if (!serverHeaders.has(name.toLowerCase())) ctx.set(name, value)
  }
  ctx.set("X-Runnel-Run-Id", id)
  ctx.body = response.body ?? ""
  return "answered"
}

/**
 * Waits on the watched index for the Run's `status.webhookResponse`: resolves
 * with it, or with undefined once the run is final (or gone) without one, or
 * the timeout passes, or the client leaves (`res` closes before the
 * answer), so that a provider that gave up is not waited for.
 */
function responseOf(id: string, deps: WebhookRoutesDeps, res: ServerResponse): Promise<RunWebhookResponse | undefined> {
  return new Promise((resolve) => {
    let settled = false
    const settle = (response: RunWebhookResponse | undefined) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      unsubscribe()
      res.off("close", left)
      resolve(response)
    }
    const left = () => settle(undefined)
    const look = (run: RunObject | undefined) => {
      const response = run?.status?.webhookResponse
      if (response !== undefined) settle(response)
      else if (run === undefined || isFinalRunStatus(run.status?.phase)) settle(undefined)
    }
    const timer = setTimeout(() => settle(undefined), deps.webhookTimeoutMs)
    const unsubscribe = deps.index.runs.onChange(id, look)
    res.once("close", left)
    // It may have left while the Run was being created.
    if (res.closed) left()
    // The Run as this server created it is in the index; a response may already be there too.
    const current = deps.index.runs.get(id)
    if (current !== undefined) look(current)
  })
}
