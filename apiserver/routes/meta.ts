import Router from "@koa/router"

export type MetaRoutesDeps = {
  /** The enabled feature names. */
  features: readonly string[]
  /** The drivers pipelines may use on this server. */
  drivers: readonly string[]
}

/** What this server offers: `GET /api/features` and `GET /api/drivers` (contract.md section 4). */
export function metaRoutes({ features, drivers }: MetaRoutesDeps): Router {
  const router = new Router()
  router.get("/api/features", (ctx) => {
    ctx.body = { features: [...features] }
  })
  router.get("/api/drivers", (ctx) => {
    ctx.body = { drivers: [...drivers] }
  })
  return router
}
