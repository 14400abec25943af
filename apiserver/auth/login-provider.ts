import {
  ArcticFetchError,
  CodeChallengeMethod,
  OAuth2Client,
  OAuth2RequestError,
  UnexpectedErrorResponseBodyError,
  UnexpectedResponseError,
} from "arctic"
import type { RbacVariables } from "../../lib/cel/expression.ts"
import type { OAuthProvider } from "../../lib/config/auth.ts"
import { errorMessage, RunnelError } from "../../lib/core/errors.ts"

/**
 * One OAuth provider of the browser login (interface.md "OAuth"): where to
 * send the browser, how to turn the code it brings back into the provider's
 * access token, and how to read the user with that token. The provider's
 * access token is used for those reads only: it is never stored or logged.
 *
 * - authorizationUrl() always sends `state` and a PKCE S256 challenge; a
 *   provider that does not know PKCE ignores the challenge and the verifier.
 * - accessToken() throws `loginRefused` (400) when the provider refuses the
 *   code, `providerFailed` (502) when it cannot be reached or answers nonsense.
 * - user() throws `providerFailed` when an API read fails.
 */
export type LoginProvider = {
  /** The callback path segment and the `Provider` value: `github`, `gitlab`, `microsoftonline`. */
  readonly segment: string
  /** The name on the login button and in messages. */
  readonly display: string
  authorizationUrl(state: string, codeVerifier: string): URL
  accessToken(code: string, codeVerifier: string): Promise<string>
  user(accessToken: string): Promise<RbacVariables>
}

/** Where a provider's two OAuth endpoints are, and what it is asked for. */
export type OAuthEndpoints = {
  /** `<callback url>/auth/<segment>/callback`, as registered with the provider. */
  redirectUri: string
  authorizeUrl: string
  tokenUrl: string
  scopes: readonly string[]
}

/**
 * The authorization-code half of a provider, on arctic's generic OAuth 2.0
 * client (with PKCE): arctic's own GitHub and Microsoft classes have their
 * hosts written in, and runnel must reach GitHub Enterprise Server and
 * sovereign clouds (and the tests' local stand-ins).
 */
export function codeExchange(
  display: string,
  { clientId, clientSecret }: Pick<OAuthProvider, "clientId" | "clientSecret">,
  endpoints: OAuthEndpoints,
) {
  const client = new OAuth2Client(clientId, clientSecret, endpoints.redirectUri)
  return {
    authorizationUrl: (state: string, codeVerifier: string) =>
      client.createAuthorizationURLWithPKCE(endpoints.authorizeUrl, state, CodeChallengeMethod.S256, codeVerifier, [
        ...endpoints.scopes,
      ]),
    async accessToken(code: string, codeVerifier: string): Promise<string> {
      let data: object
      try {
        data = (await withinTimeout(client.validateAuthorizationCode(endpoints.tokenUrl, code, codeVerifier), display))
          .data
      } catch (error) {
        if (error instanceof OAuth2RequestError) throw loginRefused(display, error.code)
        if (error instanceof ArcticFetchError) {
          throw providerFailed(`${display} could not be reached for the token: ${errorMessage(error.cause)}`)
        }
        if (error instanceof UnexpectedResponseError || error instanceof UnexpectedErrorResponseBodyError) {
          throw providerFailed(`${display}'s token endpoint answered HTTP ${error.status} without a token`)
        }
        throw error
      }
      // GitHub answers a refused code with 200 and {"error": ...}.
      const { access_token: token, error } = data as { access_token?: unknown; error?: unknown }
      if (typeof error === "string") throw loginRefused(display, error)
      if (typeof token !== "string" || token === "") {
        throw providerFailed(`${display}'s token endpoint answered without an access_token`)
      }
      return token
    },
  }
}

/**
 * arctic's fetch takes no AbortSignal: a token endpoint that never answers
 * would hold the browser's callback for ever. It gets `providerTimeoutMs`,
 * then a 502 (the request itself ends when the socket does).
 */
async function withinTimeout<T>(exchange: Promise<T>, display: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(providerFailed(`${display}'s token endpoint did not answer within ${providerTimeoutMs / 1000} s`)),
      providerTimeoutMs,
    )
  })
  try {
    return await Promise.race([exchange, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** The provider refused the login (a bad or used code, the user said no): start again. */
export const loginRefused = (display: string, reason: string) =>
  new RunnelError(
    400,
    "login_refused",
    `${display} refused the login (${reason.slice(0, 100)}); start again at /auth/login`,
  )

/** The provider could not be asked: a 502, since runnel itself is fine and the provider is not. */
export const providerFailed = (message: string) => new RunnelError(502, "provider_failed", message)

/** How long one read of a provider's API may take before the login fails with 502. */
const providerTimeoutMs = 10_000

/** A provider API read of JSON with the user's access token, or `providerFailed` naming the path (never the token). */
export async function providerJson(
  display: string,
  url: string,
  accessToken: string,
  headers: Record<string, string> = {},
): Promise<{ body: unknown; link: string | null }> {
  const path = new URL(url).pathname
  let response: Response
  try {
    response = await fetch(url, {
      headers: {
        Accept: "application/json",
        "User-Agent": "runnel",
        ...headers,
        Authorization: `Bearer ${accessToken}`,
      },
      signal: AbortSignal.timeout(providerTimeoutMs),
    })
  } catch (error) {
    throw providerFailed(`${display} could not be reached for ${path}: ${errorMessage(error)}`)
  }
  if (!response.ok) {
    await response.body?.cancel()
    throw providerFailed(`${display} answered GET ${path} with HTTP ${response.status}; the login cannot read the user`)
  }
  try {
    return { body: await response.json(), link: response.headers.get("link") }
  } catch {
    throw providerFailed(`${display} answered GET ${path} with something that is not JSON`)
  }
}

/** Enough pages for any real membership list; a list longer than this is cut rather than read for ever. */
const maxPages = 20

/**
 * Every item of a paged list: `nextOf` finds the next page's URL (a `Link`
 * header, an `@odata.nextLink`). A next page on another origin is not
 * followed: the access token goes only where the first request went.
 */
export async function pagedList(
  display: string,
  firstUrl: string,
  accessToken: string,
  itemsOf: (body: unknown) => unknown[],
  nextOf: (page: { body: unknown; link: string | null }) => string | undefined,
  headers: Record<string, string> = {},
): Promise<unknown[]> {
  const origin = new URL(firstUrl).origin
  const items: unknown[] = []
  let url: string | undefined = firstUrl
  for (let page = 0; url !== undefined && page < maxPages; page++) {
    const answer = await providerJson(display, url, accessToken, headers)
    items.push(...itemsOf(answer.body))
    const next = nextOf(answer)
    url = next !== undefined && new URL(next, url).origin === origin ? new URL(next, url).toString() : undefined
  }
  return items
}

/** The `rel="next"` URL of a `Link` header (GitHub, GitLab). */
export function nextLink({ link }: { link: string | null }): string | undefined {
  for (const part of (link ?? "").split(",")) {
    const match = /<([^>]*)>\s*;\s*rel="?next"?/.exec(part)
    if (match?.[1] !== undefined) return match[1]
  }
  return undefined
}

/** A JSON array, or a 502 saying the provider answered something else. */
export const arrayOf =
  (display: string, what: string) =>
  (body: unknown): unknown[] => {
    if (!Array.isArray(body)) throw providerFailed(`${display} answered ${what} with something that is not a list`)
    return body
  }

/** A field of a JSON object as text ("" when absent); numbers (ids) as their decimal text. */
export function field(body: unknown, name: string): string {
  const value = (body as Record<string, unknown> | null)?.[name]
  if (typeof value === "string") return value
  if (typeof value === "number") return String(value)
  return ""
}
