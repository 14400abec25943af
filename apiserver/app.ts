import Koa, { type Middleware } from "koa"
import type { AuthSettings } from "../lib/config/auth.ts"
import type { Feature } from "../lib/config/features.ts"
import { shuttingDown } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { KubeConfig } from "../lib/kube/client-node.js"
import { ResourceClient } from "../lib/kube/resource-client.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import type { ApiMetrics } from "../lib/metrics/metrics.ts"
import type { SecretStore } from "../lib/secrets/secret-store.ts"
import type { AccessPolicy } from "./access.ts"
import type { AuditLog } from "./audit.ts"
import { type Authenticate, authentication, challengeOf } from "./auth/authenticate.ts"
import { crossSiteGuard } from "./auth/cross-site.ts"
import { FailureCounter } from "./auth/failure-counter.ts"
import { jsonBody } from "./body.ts"
import { errorRenderer } from "./errors.ts"
import { auditForeignChanges, auditForeignDecisions, OwnWrites } from "./kubernetes-audit.ts"
import type { McpEndpointDeps } from "./mcp/mcp-endpoint.ts"
import { type ResourceIndex, startResourceIndex } from "./resource-index.ts"
import { type RouteAccessDeps, routeAccess } from "./route-access.ts"
import { type EventRoutesDeps, eventRoutes } from "./routes/events.ts"
import { type GateRoutesDeps, gateRoutes } from "./routes/gates.ts"
import { type Login, loginRoutes } from "./routes/login.ts"
import { meRoutes } from "./routes/me.ts"
import { metaRoutes } from "./routes/meta.ts"
import { pipelineSecretRoutes } from "./routes/pipeline-secrets.ts"
import { type PipelineRoutesDeps, pipelineRoutes } from "./routes/pipelines.ts"
import { type RunRoutesDeps, runRoutes } from "./routes/runs.ts"
import { type ScheduleRoutesDeps, scheduleRoutes } from "./routes/schedules.ts"
import { type WebhookRoutesDeps, webhookRoutes } from "./routes/webhooks.ts"
import { uiRoutes } from "./ui/ui-routes.ts"

export type ApiServerDeps = {
  /**
   * The calls on the resources of the server's namespace and on webhook Secrets (a ResourceClient),
   * as many as its routes name: specs and Secrets, never a status.
   */
  resources: PipelineRoutesDeps["resources"] &
    RouteAccessDeps["resources"] &
    RunRoutesDeps["resources"] &
    EventRoutesDeps["resources"] &
    WebhookRoutesDeps["resources"] &
    GateRoutesDeps["resources"] &
    ScheduleRoutesDeps["resources"]
  /** The same resources as the watch keeps them, with this server's writes applied at once. */
  index: Pick<ResourceIndex, "pipelines" | "runs" | "webhookSecrets">
  /** Pipeline secrets (write-only through the API) and the global secrets a run is given. */
  secrets: SecretStore
  /** Task output, as the operator stores it. */
  logs: Pick<
    LogStore,
    "tasks" | "output" | "readChunks" | "bytesAfter" | "lastChunkId" | "attach" | "outputPage" | "search"
  >
  /** The driver of a pipeline stored without one. */
  defaultDriver: string
  /** The drivers a pipeline may name, resolved (no `*`). */
  allowedDrivers: readonly string[]
  /** Queued Runs beyond which triggers answer 503. */
  maxQueueSize: number
  /** The enabled feature names. */
  features: readonly Feature[]
  /** Larger request bodies answer 413. */
  maxBodyBytes: number
  /** How long a webhook waits for the pipeline's `http.respond()` before it gets 202. */
  webhookTimeoutMs: number
  /** Slack and Stripe webhook timestamps further than this from now are refused as replays. */
  webhookMaxAgeMs: number
  /** Where the causes of 500s and failed streams go. */
  log: Log
  audit: AuditLog
  /** This server's Pipeline writes, for the audit of the watch. */
  own: OwnWrites
  /** `--mcp-allow-actions`: MCP clients may trigger pipelines and stop runs. */
  mcpAllowActions: boolean
  /** What a request's user may do: the one decision every route, MCP tool and gate asks. */
  policy: AccessPolicy
  /** Who a request comes from (its credentials checked), or a 401. */
  authenticate: Authenticate
  /** The authentication mode: its 401s' challenge; under Basic Auth pipelines take no rbac_expression. */
  authMode: AuthSettings["mode"]
  /** Repeated authentication failures per address, answered 429 (docs/auth.md); one per process, shared with /k8s. */
  failures?: FailureCounter
  /** The browser and device login under /auth, in OAuth mode; without it /auth answers 404. */
  login?: Login
  /** True once the process shuts down: new work (PUT, POST but a stop) then answers 503. */
  draining?: () => boolean
  /** Responses by status class and webhook deliveries, for monitoring; nothing is recorded without it. */
  metrics?: ApiMetrics
}

/** The REST API under /api and the web UI at / as a Koa app; `app.callback()` is a node:http handler. */
export function createApiServer(deps: ApiServerDeps): Koa {
  const app = new Koa()
  app.use(errorRenderer(deps.log, deps.metrics?.responded))
  if (deps.login !== undefined) app.use(crossSiteGuard(deps.login.callbackUrl))
  // Before authentication and the JSON body reader: /auth is how one logs in, and it reads forms.
  // One count of failures for the login and the API: a guesser cannot switch doors.
  const failures = deps.failures ?? new FailureCounter()
  const login = loginRoutes({ login: deps.login, audit: deps.audit, maxBodyBytes: deps.maxBodyBytes, failures })
  app.use(login.routes()).use(login.allowedMethods())
  // The UI's page and assets hold no data. With a browser login they load without it, and the API's 401
  // sends the page to /auth/login; with Basic Auth they come after authentication, whose 401 challenge
  // brings up the browser's own password prompt, and the browser then sends the answer with each call.
  const ui = uiRoutes()
  if (deps.login !== undefined) app.use(ui.routes())
  app.use(authentication({ ...deps, failures, challenge: challengeOf(deps.authMode) }))
  // Before the JSON body reader: MCP reads its own body, and answers malformed ones in JSON-RPC.
  app.use(lazyMcp({ ...deps, allowActions: deps.mcpAllowActions }))
  const draining = deps.draining
  if (draining !== undefined) app.use(refuseWhileDraining(draining))
  app.use(jsonBody(deps.maxBodyBytes))
  const access = routeAccess(deps)
  const routers = [
    pipelineRoutes({ ...deps, access }),
    pipelineSecretRoutes({ ...deps, access }),
    runRoutes({ ...deps, access }),
    scheduleRoutes({ ...deps, access }),
    eventRoutes({ ...deps, access }),
    webhookRoutes({ ...deps, access }),
    gateRoutes({ ...deps, access }),
    metaRoutes({ features: deps.features, drivers: deps.allowedDrivers, access }),
    meRoutes({ access }),
    ...(deps.login === undefined ? [ui] : []),
  ]
  for (const router of routers) app.use(router.routes()).use(router.allowedMethods())
  return app
}

/**
 * MCP at /mcp, loaded on its first request: the SDK takes about half a second to load on a busy
 * machine, which no server start should wait for when no assistant may ever call.
 */
function lazyMcp(deps: McpEndpointDeps): Middleware {
  let endpoint: Promise<Middleware> | undefined
  return async (ctx, next) => {
    if (ctx.path !== "/mcp") return next()
    endpoint ??= import("./mcp/mcp-endpoint.ts").then(({ mcpEndpoint }) => mcpEndpoint(deps))
    return (await endpoint)(ctx, next)
  }
}

/** While the server shuts down, stopping runs and reading still work; nothing new starts or is stored. */
function refuseWhileDraining(draining: () => boolean): Middleware {
  return async (ctx, next) => {
    const newWork = ctx.method === "PUT" || (ctx.method === "POST" && !/^\/api\/runs\/[^/]+\/stop$/.test(ctx.path))
    if (newWork && draining()) throw shuttingDown()
    await next()
  }
}

/**
 * The API server over the resources of `namespace`: the Kubernetes API calls,
 * the index the watch keeps (resolves once it has listed), and the audit of
 * changes made there by others. `stop()` ends the watch.
 */
export async function startApiServer(
  deps: Omit<ApiServerDeps, "resources" | "index" | "own"> & {
    kubeConfig: KubeConfig
    namespace: string
    /**
     * The annotation in which the Kubernetes API itself records who changed an object (runnel server's
     * embedded API sets changedByAnnotation); absent for a cluster, where any client could write it.
     */
    authorAnnotation?: string
  },
): Promise<{ callback: ReturnType<Koa["callback"]>; stop(): Promise<void> }> {
  const own = new OwnWrites()
  const resources = new ResourceClient(deps.kubeConfig, deps.namespace)
  let pipelines: ResourceIndex["pipelines"] | undefined
  const pipelineId = (name: string) => pipelines?.get(name)?.metadata?.uid ?? ""
  const index = await startResourceIndex({
    kubeConfig: deps.kubeConfig,
    client: resources,
    log: deps.log,
    pipelineHandlers: auditForeignChanges(deps.audit, own, deps.authorAnnotation),
    ...(deps.features.includes("gates")
      ? { gateHandlers: auditForeignDecisions(deps.audit, own, pipelineId, deps.authorAnnotation) }
      : {}),
  })
  pipelines = index.pipelines
  const app = createApiServer({ ...deps, resources, index, own })
  return { callback: app.callback(), stop: () => index.stop() }
}
