import Router from "@koa/router"
import { requestUser } from "../auth/authenticate.ts"
import type { RouteAccess } from "../route-access.ts"

/** `GET /api/me`: who the server takes the caller for (`runnel whoami`): the RBAC fields and the audit actor. */
export function meRoutes({ access }: { access: Pick<RouteAccess, "user"> }): Router {
  const router = new Router()
  router.get("/api/me", access.user, (ctx) => {
    const user = requestUser(ctx)
    ctx.body = {
      actor: user.actor,
      authenticated: user.authenticated,
      Provider: user.Provider,
      UserID: user.UserID,
      NickName: user.NickName,
      Name: user.Name,
      Email: user.Email,
      Organizations: [...user.Organizations],
      Groups: [...user.Groups],
    }
  })
  return router
}
