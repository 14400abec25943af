import Router from "@koa/router"
import type { Context } from "koa"
import { badRequest, errorMessage, RunnelError } from "../../lib/core/errors.ts"
import { sameSecret } from "../../lib/crypto/same-secret.ts"
import type { AuditLog } from "../audit.ts"
import { challengeOf } from "../auth/authenticate.ts"
import { DeviceGrants } from "../auth/device-grants.ts"
import { defaultFailureLimit, FailureCounter, type FailureLimit } from "../auth/failure-counter.ts"
import { html, page, pageHeaders } from "../auth/login-pages.ts"
import type { LoginProviders } from "../auth/login-providers.ts"
import { loginTimeoutMs, PendingLogins } from "../auth/pending-logins.ts"
import { sessionCookieName, sessionCookies } from "../auth/session-cookie.ts"
import { issueToken, tokenLifetimeSeconds, unauthorized, verifyToken } from "../auth/session-token.ts"
import { providerUser, type RequestUser } from "../auth/user.ts"
import { formBody } from "../body.ts"
import { OAuthError } from "../errors.ts"
import { withoutUser } from "../route-access.ts"

/** What the login needs when the server runs in OAuth mode. */
export type Login = {
  readonly sessionSecret: string
  /** The server's public base URL (--oauth-callback-url). */
  readonly callbackUrl: string
  readonly providers: LoginProviders
}

export type LoginRoutesDeps = {
  /** Undefined unless OAuth is configured: then every /auth path answers 404 saying so. */
  login: Login | undefined
  audit: AuditLog
  maxBodyBytes: number
  /** Failed logins per address (and wrong device codes per user), shared with the API's authentication(). */
  failures?: FailureCounter | undefined
  /** The logins and device grants under way, and the clock; given by tests that move the clock. */
  pendingLogins?: PendingLogins
  deviceGrants?: DeviceGrants
  now?: () => number
}

/** The cookie that ties a provider's callback to the browser that started the login. */
const loginStateCookie = "runnel_login"
const deviceGrantType = "urn:ietf:params:oauth:grant-type:device_code"
/**
 * Logins and device codes one address may start a minute (docs/auth.md): more than a person
 * clicks, few enough that a flood costs its sender more than the server.
 */
export const loginStartLimit: FailureLimit = { failures: 10, windowMs: 60_000 }
/** The challenge of a 401 here: the one the API answers in OAuth mode, which is the only mode with /auth. */
const challenge = challengeOf("oauth")

/**
 * The browser login (interface.md "OAuth") and the device authorization
 * grant behind `runnel login` (RFC 8628), under /auth:
 *
 * - `GET /auth/login`: one button per enabled provider (and who is logged in).
 * - `GET /auth/<provider>/login[?next=/path]`: to the provider, with `state` and PKCE.
 * - `GET /auth/<provider>/callback`: the code becomes the user, the user a runnel JWT in the
 *   session cookie; then to `next`.
 * - `GET|POST /auth/logout`: a page with a button; the POST clears the cookie.
 * - `POST /auth/device/code`, `POST /auth/device/token`: RFC 8628's device authorization and
 *   token endpoints (forms in, JSON out).
 * - `GET|POST /auth/device`: the verification page, where a logged-in person approves a user code.
 *
 * None of these is behind authentication(): they are how one gets authenticated. The POSTs that
 * act for a logged-in person are behind crossSiteGuard like every other cookie request.
 */
export function loginRoutes({
  login,
  audit,
  maxBodyBytes,
  failures = new FailureCounter(),
  pendingLogins,
  deviceGrants,
  now = Date.now,
}: LoginRoutesDeps): Router {
  const router = new Router()
  const noUser = withoutUser("login")
  if (login === undefined) {
    router.all(/^\/auth(\/.*)?$/, noUser, () => {
      throw new RunnelError(
        404,
        "no_login",
        "this server has no OAuth login: start it with a provider's --oauth-<provider>-client-id and --oauth-<provider>-client-secret (docs/auth.md)",
      )
    })
    return router
  }
  const { sessionSecret, callbackUrl, providers } = login
  const cookies = sessionCookies(sessionSecret)
  const pending = pendingLogins ?? new PendingLogins()
  const grants = deviceGrants ?? new DeviceGrants()
  // Starting a login or a device code is not a failure, but it fills a table: counted on its own.
  const starts = new FailureCounter(loginStartLimit)
  const secure = callbackUrl.startsWith("https:")
  const cookieOptions = { httpOnly: true, sameSite: "lax", secure, overwrite: true } as const
  const setCookie = (ctx: Context, name: string, value: string | null, options: { path: string; maxAge?: number }) => {
    // Behind a proxy that ends TLS the request is plain http; the cookie is still Secure when the public URL is https.
    if (secure) ctx.cookies.secure = true
    ctx.cookies.set(name, value, { ...cookieOptions, ...options })
  }
  const form = (ctx: Context) =>
    formBody(ctx.req, { contentLength: ctx.get("Content-Length"), contentType: ctx.get("Content-Type") }, maxBodyBytes)
  const show = (ctx: Context, status: number, title: string, body: string) => {
    ctx.set(pageHeaders)
    ctx.status = status
    ctx.type = "text/html; charset=utf-8"
    ctx.body = page(title, body)
  }
  /**
   * Sets Retry-After and answers how many seconds that is, when `waitMs` is more than none; the
   * caller throws or shows its 429 in its endpoint's own shape.
   */
  const retryAfter = (ctx: Context, waitMs: number): number | undefined => {
    if (waitMs <= 0) return undefined
    const seconds = Math.ceil(waitMs / 1000)
    ctx.set("Retry-After", String(seconds))
    return seconds
  }
  /** Counts one start from the request's address, or a 429 when it has too many starts or `outstanding` under way. */
  const countStart = (ctx: Context, outstanding: number, refuse: (status: 429, message: string) => Error) => {
    const address = ctx.ip
    const seconds = retryAfter(ctx, Math.max(starts.blockedFor(address, now()), outstanding))
    if (seconds !== undefined) {
      throw refuse(
        429,
        `too many logins started from this address (${loginStartLimit.failures} a minute, or too many under way); try again in ${seconds} s`,
      )
    }
    starts.add(address, now())
  }
  /** A 429 in JSON when the request's address has failed too often (the API's limit, shared). */
  const refuseFailedAddress = (ctx: Context) => {
    const seconds = retryAfter(ctx, failures.blockedFor(ctx.ip, now()))
    if (seconds !== undefined) {
      throw new RunnelError(
        429,
        "too_many_failures",
        `too many failed authentication attempts from this address; try again in ${seconds} s`,
      )
    }
  }
  /** The person the session cookie names, if it holds a valid token. */
  const cookieUser = async (ctx: Context): Promise<RequestUser | undefined> => {
    const value = ctx.cookies.get(sessionCookieName)
    const token = value ? cookies.open(value) : undefined
    return token === undefined ? undefined : verifyToken(sessionSecret, token).catch(() => undefined)
  }

  router.get("/auth/login", noUser, async (ctx) => {
    const next = returnPath(ctx.query.next)
    const user = await cookieUser(ctx)
    const buttons = providers.all
      .map(
        (provider) =>
          `<form method="get" action="/auth/${provider.segment}/login"><input type="hidden" name="next" value="${html(next)}"><button type="submit">Log in with ${html(provider.display)}</button></form>`,
      )
      .join("\n")
    const who =
      user === undefined
        ? ""
        : `<p>Logged in as <strong>${html(user.Name)}</strong> (${html(user.actor)}).</p>
<form method="post" action="/auth/logout"><button type="submit">Log out</button></form>
<p>Log in again as someone else:</p>`
    show(ctx, 200, "Log in to runnel", `${who}\n${buttons}`)
  })

  router.get("/auth/:provider/login", noUser, (ctx) => {
    const provider = providers.get(ctx.params.provider as string)
    const next = returnPath(ctx.query.next)
    countStart(
      ctx,
      pending.blockedFor(ctx.ip),
      (status, message) => new RunnelError(status, "too_many_logins", message),
    )
    const { state, codeVerifier } = pending.start(provider.segment, next, ctx.ip)
    setCookie(ctx, loginStateCookie, state, { path: "/auth", maxAge: loginTimeoutMs })
    ctx.set("Cache-Control", "no-store")
    ctx.redirect(provider.authorizationUrl(state, codeVerifier).toString())
  })

  router.get("/auth/:provider/callback", noUser, async (ctx) => {
    const provider = providers.get(ctx.params.provider as string)
    refuseFailedAddress(ctx)
    // A forged, replayed or refused callback counts against the address like a wrong password.
    const failed = (reason: string) => {
      failures.add(ctx.ip, now())
      audit({
        event: "auth.login_failed",
        actor: "anonymous",
        provider: provider.segment,
        reason,
        address: ctx.ip,
      })
    }
    const state = single(ctx.query.state)
    if (state === undefined || state === "") {
      failed("no state")
      throw badRequest(`the callback from ${provider.display} has no state; start the login again at /auth/login`)
    }
    const started = pending.finish(state)
    const browserState = ctx.cookies.get(loginStateCookie)
    setCookie(ctx, loginStateCookie, null, { path: "/auth" })
    if (started === undefined || started.segment !== provider.segment) {
      failed("unknown state")
      throw badRequest(
        "the login's state is unknown, expired or already used (a callback works once, within 10 minutes); start the login again at /auth/login",
      )
    }
    if (browserState === undefined || !sameSecret(browserState, state)) {
      failed("state of another browser")
      throw badRequest(
        "this login was started in another browser (or this one does not keep cookies); start the login again at /auth/login",
      )
    }
    const refusal = single(ctx.query.error)
    if (refusal !== undefined) {
      failed(`provider answered ${refusal.slice(0, 60)}`)
      throw new RunnelError(
        403,
        "login_refused",
        `${provider.display} did not authorize the login (${refusal.slice(0, 60)}); start again at /auth/login`,
      )
    }
    const code = single(ctx.query.code)
    if (code === undefined || code === "") {
      failed("no code")
      throw badRequest(`the callback from ${provider.display} has no code; start the login again at /auth/login`)
    }
    let user: RequestUser
    try {
      const fields = await provider.user(await provider.accessToken(code, started.codeVerifier))
      if (fields.UserID === "" || fields.NickName === "") {
        throw new RunnelError(502, "provider_failed", `${provider.display} answered without the user's id or name`)
      }
      user = providerUser(fields)
    } catch (error) {
      failed(errorMessage(error))
      throw error
    }
    const token = await issueToken(sessionSecret, user)
    setCookie(ctx, sessionCookieName, cookies.seal(token), { path: "/", maxAge: tokenLifetimeSeconds * 1000 })
    audit({ event: "auth.login", actor: user.actor, provider: provider.segment, via: "browser", address: ctx.ip })
    ctx.set("Cache-Control", "no-store")
    ctx.redirect(started.next)
  })

  router.get("/auth/logout", noUser, (ctx) => {
    show(
      ctx,
      200,
      "Log out of runnel",
      `<form method="post" action="/auth/logout"><button type="submit">Log out</button></form>`,
    )
  })
  router.post("/auth/logout", noUser, (ctx) => {
    setCookie(ctx, sessionCookieName, null, { path: "/" })
    ctx.status = 303
    ctx.redirect("/auth/login")
  })

  router.post("/auth/device/code", noUser, async (ctx) => {
    await form(ctx)
    countStart(ctx, grants.blockedFor(ctx.ip), (status, message) => new OAuthError(status, "slow_down", message))
    const grant = grants.start(ctx.ip)
    const verificationUri = `${callbackUrl}/auth/device`
    ctx.set("Cache-Control", "no-store")
    ctx.body = {
      device_code: grant.deviceCode,
      user_code: grant.userCode,
      verification_uri: verificationUri,
      verification_uri_complete: `${verificationUri}?user_code=${grant.userCode}`,
      expires_in: grant.expiresInSeconds,
      interval: grant.intervalSeconds,
    }
  })

  router.post("/auth/device/token", noUser, async (ctx) => {
    ctx.set("Cache-Control", "no-store")
    const fields = await form(ctx)
    const grantType = fields.get("grant_type")
    if (grantType === null || grantType === "") {
      throw new OAuthError(400, "invalid_request", `the request has no grant_type; send grant_type=${deviceGrantType}`)
    }
    if (grantType !== deviceGrantType) {
      throw new OAuthError(
        400,
        "unsupported_grant_type",
        `grant_type ${JSON.stringify(grantType.slice(0, 100))} is not served here; this endpoint takes ${deviceGrantType}`,
      )
    }
    const deviceCode = fields.get("device_code")
    if (deviceCode === null || deviceCode === "") {
      throw new OAuthError(
        400,
        "invalid_request",
        "the request has no device_code; send the one /auth/device/code gave",
      )
    }
    const { token } = grants.poll(deviceCode)
    ctx.body = { access_token: token, token_type: "Bearer", expires_in: tokenLifetimeSeconds }
  })

  const codeForm = (code: string, message = "") =>
    `${message === "" ? "" : `<p class="error">${html(message)}</p>\n`}<form method="get" action="/auth/device">
<p><label>Code shown by <code>runnel login</code>: <input name="user_code" value="${html(code)}" autocomplete="off" autofocus required></label></p>
<button type="submit">Continue</button>
</form>`
  const unknownCode = "That code is unknown, expired or already used. Run runnel login again for a new one."
  // Wrong codes count per person too, so that a guesser moving between addresses is still slowed.
  const personKey = (user: RequestUser) => `person ${user.actor}`
  /** Shows a 429 page when the person or the address has failed too often; true when it did. */
  const refusedGuesser = (ctx: Context, user: RequestUser): boolean => {
    const waitMs = Math.max(failures.blockedFor(ctx.ip, now()), failures.blockedFor(personKey(user), now()))
    const seconds = retryAfter(ctx, waitMs)
    if (seconds === undefined) return false
    show(
      ctx,
      429,
      "Log in a device",
      `<p class="error">Too many wrong codes or failed logins (${defaultFailureLimit.failures} a minute). Try again in ${seconds} s.</p>`,
    )
    return true
  }
  const wrongCode = (ctx: Context, user: RequestUser, given: string) => {
    failures.add(ctx.ip, now())
    failures.add(personKey(user), now())
    show(ctx, 400, "Log in a device", codeForm(given, unknownCode))
  }

  router.get("/auth/device", noUser, async (ctx) => {
    const user = await cookieUser(ctx)
    if (user === undefined) {
      ctx.redirect(`/auth/login?next=${encodeURIComponent(ctx.url)}`)
      return
    }
    const given = single(ctx.query.user_code) ?? ""
    if (given === "") {
      show(ctx, 200, "Log in a device", codeForm(""))
      return
    }
    if (refusedGuesser(ctx, user)) return
    const code = grants.pendingUserCode(given)
    if (code === undefined) {
      wrongCode(ctx, user, given)
      return
    }
    // The person confirms the code they were shown, so that a code sent to them by someone else is not approved blindly.
    show(
      ctx,
      200,
      "Log in a device",
      `<p>A command line (<code>runnel login</code>) asks to act as <strong>${html(user.Name)}</strong> (${html(user.actor)}) for 30 days.</p>
<p>Approve only if this code is the one your terminal shows:</p>
<p class="code">${html(code)}</p>
<form method="post" action="/auth/device"><input type="hidden" name="user_code" value="${html(code)}"><button type="submit" name="decision" value="approve">Approve</button></form>
<form method="post" action="/auth/device"><input type="hidden" name="user_code" value="${html(code)}"><button type="submit" name="decision" value="deny">Deny</button></form>`,
    )
  })

  router.post("/auth/device", noUser, async (ctx) => {
    const fields = await form(ctx)
    const user = await cookieUser(ctx)
    if (user === undefined) {
      const error = unauthorized("log in at /auth/login before approving a device code")
      const cookieGiven = ctx.cookies.get(sessionCookieName) !== undefined
      // A session cookie that does not hold a valid token is a wrong credential, as at the API.
      if (cookieGiven) failures.add(ctx.ip, now())
      ctx.set("WWW-Authenticate", challenge(error, cookieGiven))
      throw error
    }
    if (refusedGuesser(ctx, user)) return
    const given = fields.get("user_code") ?? ""
    const decision = fields.get("decision")
    if (decision !== "approve" && decision !== "deny") {
      throw badRequest('the form needs decision "approve" or "deny"')
    }
    const approved = decision === "approve"
    const decided = grants.decide(
      given,
      approved ? { approved: true, token: await issueToken(sessionSecret, user) } : { approved: false },
    )
    if (!decided) {
      wrongCode(ctx, user, given)
      return
    }
    if (approved) {
      audit({
        event: "auth.device_approved",
        actor: user.actor,
        provider: user.Provider,
        via: "device",
        address: ctx.ip,
      })
    }
    show(
      ctx,
      200,
      approved ? "Device logged in" : "Device login denied",
      approved
        ? "<p>Approved. Go back to your terminal: <code>runnel login</code> finishes by itself.</p>"
        : "<p>Denied. The command line that asked gets no token.</p>",
    )
  })

  return router
}

/** One query value: a repeated parameter is ambiguous and counts as absent. */
function single(value: string | string[] | undefined): string | undefined {
  return typeof value === "string" ? value : undefined
}

/** The web UI's home until there is one: the login page says who is logged in. */
const defaultReturnPath = "/auth/login"

/**
 * `?next=`, honoured only as a path on this server: one leading `/`, not
 * `//host` or `/\host` (both mean another host to a browser), no backslash,
 * space or control character anywhere. Anything else is a 400, never a
 * redirect elsewhere.
 */
export function returnPath(next: string | string[] | undefined): string {
  if (next === undefined || next === "") return defaultReturnPath
  const path = single(next)
  const base = "http://runnel.invalid"
  if (
    path === undefined ||
    path.length > 2048 ||
    !/^\/(?![/\\])[^\\\s\p{Cc}]*$/u.test(path) ||
    new URL(path, base).origin !== base
  ) {
    throw badRequest("next must be a path on this server, such as /api/me (one leading /, no scheme or host)")
  }
  return path
}
