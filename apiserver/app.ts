import Koa from "koa"
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
}

/** The REST API under /api as a Koa app; `app.callback()` is a node:http handler. */
export function createApiServer(deps: ApiServerDeps): Koa {
  const app = new Koa()
  app.use(errorRenderer(deps.log))
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
