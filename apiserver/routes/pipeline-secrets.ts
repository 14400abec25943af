import Router from "@koa/router"
import { notFound } from "../../lib/core/errors.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import { pipelineScope, type SecretStore } from "../../lib/secrets/secret-store.ts"
import { findPipeline } from "../find-pipeline.ts"
import type { ResourceIndex } from "../resource-index.ts"

export type PipelineSecretRoutesDeps = {
  resources: Pick<ResourceClient, "getPipeline">
  index: Pick<ResourceIndex, "pipelines">
  secrets: Pick<SecretStore, "keys" | "delete">
}

/**
 * A pipeline's secrets are write-only (contract.md section 4): PUT and POST
 * set them, these routes list their names and remove one. No route returns a value.
 */
export function pipelineSecretRoutes({ resources, index, secrets }: PipelineSecretRoutesDeps): Router {
  const router = new Router()
  const scopeOf = async (key: string) => {
    const pipeline = await findPipeline(resources, index.pipelines, key)
    if (pipeline === undefined) throw notFound("pipeline", key)
    return { name: pipeline.metadata?.name ?? "", scope: pipelineScope(pipeline.metadata?.uid ?? "") }
  }

  router.get("/api/pipelines/:name/secrets", async (ctx) => {
    const { scope } = await scopeOf(ctx.params.name ?? "")
    ctx.body = { keys: await secrets.keys(scope) }
  })

  router.delete("/api/pipelines/:name/secrets/:key", async (ctx) => {
    const { name, scope } = await scopeOf(ctx.params.name ?? "")
    const key = ctx.params.key ?? ""
    if (!(await secrets.delete(scope, key)))
      throw notFound("secret", key, `pipeline "${name}" has no secret of that name`)
    ctx.status = 204
  })

  return router
}
