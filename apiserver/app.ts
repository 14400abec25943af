import Koa, { type Middleware } from "koa"
import { RunnelError } from "../lib/core/errors.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { jsonBody } from "./body.ts"
import { type ErrorLog, errorRenderer } from "./errors.ts"
import type { Resources } from "./resources.ts"
import { eventRoutes } from "./routes/events.ts"
import { metaRoutes } from "./routes/meta.ts"
import { pipelineRoutes } from "./routes/pipelines.ts"
import { runRoutes } from "./routes/runs.ts"

export type ApiServerDeps = {
  /** The Pipeline and Run resources of the server's namespace (kubeResources() over client-node). */
  resources: Resources
  /** Task output, as the operator stores it. */
  logs: Pick<LogStore, "tasks" | "output" | "readChunks">
  /** The driver of a pipeline stored without one. */
  defaultDriver: string
  /** The drivers a pipeline may name, resolved (no `*`). */
  allowedDrivers: readonly string[]
  /** Queued Runs beyond which triggers answer 503. */
  maxQueueSize: number
  /** The enabled feature names. */
  features: readonly string[]
  /** Larger request bodies answer 413. */
  maxBodyBytes: number
  /** Where the causes of 500s go. */
  log: ErrorLog
  audit: Parameters<typeof pipelineRoutes>[0]["audit"]
  /** True once the process shuts down: new work (PUT, POST but a stop) then answers 503. */
  draining?: () => boolean
}

/** The REST API under /api as a Koa app; `app.callback()` is a node:http handler. */
export function createApiServer(deps: ApiServerDeps): Koa {
  const app = new Koa()
  app.use(errorRenderer(deps.log))
  const draining = deps.draining
  if (draining !== undefined) app.use(refuseWhileDraining(draining))
  app.use(jsonBody(deps.maxBodyBytes))
  const routers = [
    pipelineRoutes(deps),
    runRoutes(deps),
    eventRoutes(deps),
    metaRoutes({ features: deps.features, drivers: deps.allowedDrivers }),
  ]
  for (const router of routers) app.use(router.routes()).use(router.allowedMethods())
  return app
}

/** While the server shuts down, stopping runs and reading still work; nothing new starts or is stored. */
function refuseWhileDraining(draining: () => boolean): Middleware {
  return async (ctx, next) => {
    const newWork = ctx.method === "PUT" || (ctx.method === "POST" && !/^\/api\/runs\/[^/]+\/stop$/.test(ctx.path))
    if (newWork && draining()) {
      throw new RunnelError(
        503,
        "shutting_down",
        "the server is shutting down and takes no new work; try again once it is back",
      )
    }
    await next()
  }
}
