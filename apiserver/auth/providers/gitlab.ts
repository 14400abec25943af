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
 * GitLab.com or a self-hosted GitLab (an OAuth application): the user from
 * /api/v4/user and, as `Groups`, the full paths of the groups they belong to
 * (any role, Guest and up, inherited membership included).
 */
export function gitlab(settings: OAuthProvider, callbackUrl: string): LoginProvider {
  const display = "GitLab"
  const api = `${settings.url}/api/v4`
  return {
    segment: "gitlab",
    display,
    ...codeExchange(display, settings, {
      redirectUri: `${callbackUrl}/auth/gitlab/callback`,
      authorizeUrl: `${settings.url}/oauth/authorize`,
      tokenUrl: `${settings.url}/oauth/token`,
      // read_user is enough for /user; listing the user's groups needs read_api.
      scopes: ["read_user", "read_api"],
    }),
    async user(accessToken) {
      const [user, groups] = await Promise.all([
        providerJson(display, `${api}/user`, accessToken),
        pagedList(
          display,
          `${api}/groups?min_access_level=10&per_page=100`,
          accessToken,
          arrayOf(display, "/groups"),
          nextLink,
        ),
      ])
      const username = field(user.body, "username")
      return {
        UserID: field(user.body, "id"),
        NickName: username,
        Name: field(user.body, "name") || username,
        Email: field(user.body, "email"),
        Provider: "gitlab",
        Organizations: [],
        Groups: groups.map((group) => field(group, "full_path")).filter((path) => path !== ""),
      }
    },
  }
}
