import Router from "@koa/router"
import type { RouteAccess } from "../route-access.ts"

export type MetaRoutesDeps = {
  /** The enabled feature names. */
  features: readonly string[]
  /** The drivers pipelines may use on this server. */
  drivers: readonly string[]
  access: Pick<RouteAccess, "user">
}

/** What this server offers: `GET /api/features` and `GET /api/drivers` (contract.md section 4). */
export function metaRoutes({ features, drivers, access }: MetaRoutesDeps): Router {
  const router = new Router()
  router.get("/api/features", access.user, (ctx) => {
    ctx.body = { features: [...features] }
  })
  router.get("/api/drivers", access.user, (ctx) => {
    ctx.body = { drivers: [...drivers] }
  })
  return router
}
