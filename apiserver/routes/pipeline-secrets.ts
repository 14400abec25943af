import Router from "@koa/router"
import { notFound } from "../../lib/core/errors.ts"
import { pipelineScope, type SecretStore } from "../../lib/secrets/secret-store.ts"
import { checked, type RouteAccess } from "../route-access.ts"

export type PipelineSecretRoutesDeps = {
  secrets: Pick<SecretStore, "keys" | "delete">
  access: RouteAccess
}

/**
 * A pipeline's secrets are write-only (contract.md section 4): PUT and POST
 * set them, these routes list their names and remove one. No route returns a value.
 */
export function pipelineSecretRoutes({ secrets, access }: PipelineSecretRoutesDeps): Router {
  const router = new Router()
  const scopeOf = (state: Record<string, unknown>) => {
    const pipeline = checked.pipeline(state)
    return { name: pipeline.metadata?.name ?? "", scope: pipelineScope(pipeline.metadata?.uid ?? "") }
  }

  router.get("/api/pipelines/:name/secrets", access.pipeline, async (ctx) => {
    const { scope } = scopeOf(ctx.state)
    ctx.body = { keys: await secrets.keys(scope) }
  })

  router.delete("/api/pipelines/:name/secrets/:key", access.pipeline, async (ctx) => {
    const { name, scope } = scopeOf(ctx.state)
    const key = ctx.params.key ?? ""
    if (!(await secrets.delete(scope, key)))
      throw notFound("secret", key, `pipeline "${name}" has no secret of that name`)
    ctx.status = 204
  })

  return router
}
