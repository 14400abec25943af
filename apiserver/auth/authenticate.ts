import type { Context, Middleware } from "koa"
import type { AuthSettings } from "../../lib/config/auth.ts"
import { RunnelError } from "../../lib/core/errors.ts"
import { sameSecret } from "../../lib/crypto/same-secret.ts"
import type { FailureCounter } from "./failure-counter.ts"
import { type SessionCookies, sessionCookieName, sessionCookies } from "./session-cookie.ts"
import { unauthorized, verifyToken } from "./session-token.ts"
import { anonymousUser, basicUser, type RequestUser } from "./user.ts"

/** What a request brings to prove who it is: its Authorization header, and the session cookie's value. */
export type Credentials = { readonly authorization?: string | undefined; readonly sessionCookie?: string | undefined }

/** The user of a request, or a 401 RunnelError saying what was missing or wrong. */
export type Authenticate = (credentials: Credentials) => Promise<RequestUser>

/**
 * The one function that turns credentials into a user, for every mode of
 * interface.md's "Authentication": open access (everyone is anonymous), Basic
 * Auth (one user, compared in constant time), OAuth (a Bearer JWT, or the
 * browser's session cookie holding one).
 */
export function authenticator(auth: AuthSettings): Authenticate {
  switch (auth.mode) {
    case "open":
      return async () => anonymousUser
    case "basic":
      return basicAuthenticator(auth.username, auth.password)
    case "oauth":
      return oauthAuthenticator(auth.sessionSecret, sessionCookies(auth.sessionSecret))
  }
}

function basicAuthenticator(username: string, password: string): Authenticate {
  const user = basicUser(username)
  return async ({ authorization }) => {
    const credentials = schemeValue(authorization, "Basic")
    const decoded = Buffer.from(credentials, "base64").toString("utf8")
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(credentials) || decoded.length === 0) {
      throw unauthorized("the Basic credentials are not base64 of user:password")
    }
    const colon = decoded.indexOf(":")
    if (colon < 0) throw unauthorized("the Basic credentials have no colon: send base64 of user:password")
    // Both compared, always: stopping at a wrong name would tell which names exist.
    const nameMatches = sameSecret(decoded.slice(0, colon), username)
    const passwordMatches = sameSecret(decoded.slice(colon + 1), password)
    if (!(nameMatches && passwordMatches)) throw unauthorized("wrong user name or password")
    return user
  }
}

function oauthAuthenticator(sessionSecret: string, cookies: SessionCookies): Authenticate {
  return async ({ authorization, sessionCookie }) => {
    if (authorization !== undefined) return verifyToken(sessionSecret, schemeValue(authorization, "Bearer"))
    if (sessionCookie !== undefined && sessionCookie !== "") {
      const token = cookies.open(sessionCookie)
      if (token === undefined) throw unauthorized("the session cookie was not issued by this server; log in again")
      return verifyToken(sessionSecret, token)
    }
    throw unauthorized(
      "authentication required: send Authorization: Bearer <token> (runnel login prints one into ~/.runnel/auth.config), or log in at /auth/login",
    )
  }
}

/** The credentials after `<scheme> `, or a 401 naming what the header lacks (never echoing what it holds). */
function schemeValue(authorization: string | undefined, scheme: "Basic" | "Bearer"): string {
  if (authorization === undefined || authorization === "") {
    throw unauthorized(`authentication required: send an Authorization: ${scheme} header`)
  }
  const space = authorization.indexOf(" ")
  // HTTP drops a header value's trailing spaces: "Bearer " arrives as "Bearer".
  if (space < 0 && authorization.toLowerCase() === scheme.toLowerCase()) {
    throw unauthorized(`the Authorization header has no ${scheme} credentials after the scheme`)
  }
  if (space < 0) {
    throw unauthorized(`the Authorization header has no scheme: send "Authorization: ${scheme} <credentials>"`)
  }
  const given = authorization.slice(0, space)
  if (given.toLowerCase() !== scheme.toLowerCase()) {
    // The scheme is named back only when it looks like one, so that a pasted secret is never echoed.
    const named = /^[A-Za-z][A-Za-z0-9-]{0,19}$/.test(given) ? `, not ${given}` : ""
    throw unauthorized(`the Authorization header must use the ${scheme} scheme${named}`)
  }
  const value = authorization.slice(space + 1).trim()
  if (value === "") throw unauthorized(`the Authorization header has no ${scheme} credentials after the scheme`)
  return value
}

/** The `WWW-Authenticate` header of a 401 in one mode (RFC 7617 for Basic, RFC 6750 for Bearer). */
export type Challenge = (error: Error, credentialsGiven: boolean) => string

export function challengeOf(mode: AuthSettings["mode"]): Challenge {
  if (mode === "basic") return () => 'Basic realm="runnel", charset="UTF-8"'
  return (error, credentialsGiven) =>
    credentialsGiven
      ? `Bearer realm="runnel", error="invalid_token", error_description="${quoted(error.message)}"`
      : 'Bearer realm="runnel"'
}

/** A quoted-string's content: printable ASCII only, without quotes or backslashes. */
const quoted = (text: string) => text.replace(/[^\x20-\x7e]|["\\]/g, "'")

/**
 * Puts the request's user on the context for every route, or answers 401
 * with the mode's challenge. Webhooks are authenticated by their signatures
 * instead (interface.md), and /auth needs no user. An address whose
 * credentials failed `failures`' limit within its window is answered 429
 * with Retry-After before its credentials are even looked at, so guessing
 * a password is slow.
 */
export function authentication(deps: {
  authenticate: Authenticate
  challenge: Challenge
  /** Shared with whatever else checks credentials in this process (/k8s), so a guesser cannot switch doors. */
  failures: FailureCounter
}): Middleware {
  const { failures } = deps
  return async (ctx, next) => {
    // /auth is how one logs in (apiserver/routes/login.ts); it checks the session cookie itself where it needs a user.
    if (!ctx.path.startsWith("/api/webhooks/") && !/^\/auth(\/|$)/.test(ctx.path)) {
      const address = ctx.ip
      const waitMs = failures.blockedFor(address, Date.now())
      if (waitMs > 0) {
        const seconds = Math.ceil(waitMs / 1000)
        ctx.set("Retry-After", String(seconds))
        throw new RunnelError(
          429,
          "too_many_failures",
          `too many failed authentication attempts from this address; try again in ${seconds} s`,
        )
      }
      const authorization = ctx.get("Authorization") || undefined
      const sessionCookie = ctx.cookies.get(sessionCookieName)
      try {
        ctx.state.user = await deps.authenticate({ authorization, sessionCookie })
      } catch (error) {
        if (error instanceof RunnelError && error.status === 401) {
          const given = authorization !== undefined || sessionCookie !== undefined
          // Only wrong credentials count: a client that has not logged in yet is no guesser.
          if (given) failures.add(address, Date.now())
          ctx.set("WWW-Authenticate", deps.challenge(error, given))
        }
        throw error
      }
    }
    await next()
  }
}

/** The user authentication() found; anonymous where none was asked for (webhooks). */
export function requestUser(ctx: Context): RequestUser {
  return (ctx.state.user as RequestUser | undefined) ?? anonymousUser
}
