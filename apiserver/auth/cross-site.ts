import type { Middleware } from "koa"
import { RunnelError } from "../../lib/core/errors.ts"
import { sessionCookieName } from "./session-cookie.ts"

const safeMethods = new Set(["GET", "HEAD", "OPTIONS"])

/**
 * Cross-site request forgery defence for requests the browser's session
 * cookie authenticates: a request that changes something (not GET, HEAD or
 * OPTIONS), carries the cookie and no Authorization header must come from a
 * page of this server, as its `Origin` header (or, without one, its
 * `Referer`) says. The cookie's SameSite=Lax already keeps it off most
 * cross-site requests; this covers the browsers and paths SameSite does not
 * (a sibling subdomain is "same-site"). API clients sending a Bearer or Basic
 * header are not affected: a browser never adds one by itself.
 *
 * `publicUrl` is the server's public base URL (--oauth-callback-url); the
 * origin of the request itself (its Host) is accepted too, since a browser
 * that reached the server under that name sends it.
 */
export function crossSiteGuard(publicUrl: string): Middleware {
  const publicOrigin = new URL(publicUrl).origin
  return async (ctx, next) => {
    // Webhooks are authenticated by their signatures, never by the cookie.
    const cookieAuthenticated =
      ctx.get("Authorization") === "" && ctx.cookies.get(sessionCookieName) && !ctx.path.startsWith("/api/webhooks/")
    if (!safeMethods.has(ctx.method) && cookieAuthenticated) {
      const origin = ctx.get("Origin") || refererOrigin(ctx.get("Referer"))
      // Not ctx.origin: Koa 3 answers the Origin header there, which would let every site through.
      if (origin !== publicOrigin && origin !== `${ctx.protocol}://${ctx.host}`) {
        throw new RunnelError(
          403,
          "cross_site",
          origin === ""
            ? `a ${ctx.method} authenticated by the session cookie must say where it comes from (Origin or Referer header); API clients send Authorization: Bearer instead`
            : `a ${ctx.method} authenticated by the session cookie came from another site (${origin.slice(0, 100)}); only pages of ${publicOrigin} may send one`,
        )
      }
    }
    await next()
  }
}

function refererOrigin(referer: string): string {
  try {
    return referer === "" ? "" : new URL(referer).origin
  } catch {
    return ""
  }
}
