import type { OAuthProvider } from "../../../lib/config/auth.ts"
import {
  arrayOf,
  codeExchange,
  field,
  type LoginProvider,
  nextLink,
  pagedList,
  providerJson,
} from "../login-provider.ts"

/**
 * GitHub or a GitHub Enterprise Server (an OAuth app): the user, their
 * primary verified email, and their organizations' logins as `Organizations`.
 * The REST API is api.github.com for github.com and `<url>/api/v3` for a
 * GitHub Enterprise Server.
 */
export function github(settings: OAuthProvider, callbackUrl: string): LoginProvider {
  const display = "GitHub"
  const api = githubApiUrl(settings.url)
  const headers = { Accept: "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28" }
  return {
    segment: "github",
    display,
    ...codeExchange(display, settings, {
      redirectUri: `${callbackUrl}/auth/github/callback`,
      authorizeUrl: `${settings.url}/login/oauth/authorize`,
      tokenUrl: `${settings.url}/login/oauth/access_token`,
      // read:org lists organizations whose membership is private too; user:email reads the emails.
      scopes: ["read:user", "user:email", "read:org"],
    }),
    async user(accessToken) {
      const [user, emails, orgs] = await Promise.all([
        providerJson(display, `${api}/user`, accessToken, headers),
        pagedList(
          display,
          `${api}/user/emails?per_page=100`,
          accessToken,
          arrayOf(display, "/user/emails"),
          nextLink,
          headers,
        ),
        pagedList(
          display,
          `${api}/user/orgs?per_page=100`,
          accessToken,
          arrayOf(display, "/user/orgs"),
          nextLink,
          headers,
        ),
      ])
      const login = field(user.body, "login")
      const primary = emails.find(
        (email) =>
          (email as { primary?: unknown }).primary === true && (email as { verified?: unknown }).verified === true,
      )
      return {
        UserID: field(user.body, "id"),
        NickName: login,
        Name: field(user.body, "name") || login,
        Email: primary === undefined ? "" : field(primary, "email"),
        Provider: "github",
        Organizations: orgs.map((org) => field(org, "login")).filter((name) => name !== ""),
        Groups: [],
      }
    },
  }
}

/** Where GitHub's REST API answers for a GitHub address. */
export function githubApiUrl(url: string): string {
  const host = new URL(url).hostname.toLowerCase()
  return host === "github.com" || host === "www.github.com" ? "https://api.github.com" : `${url}/api/v3`
}
