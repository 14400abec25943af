import type { OAuthProvider } from "../../../lib/config/auth.ts"
import { codeExchange, field, type LoginProvider, pagedList, providerFailed, providerJson } from "../login-provider.ts"

/**
 * Microsoft Entra ID through the Microsoft identity platform (v2.0
 * endpoints of `<authority>/<tenant>`): the user from Microsoft Graph's
 * /me and, as `Groups`, the object ids and display names of the groups in
 * /me/memberOf. Display names are not unique in a directory; RBAC rules that
 * must not be fooled by a look-alike group name its id (docs/auth.md).
 */
export function microsoft(settings: OAuthProvider, callbackUrl: string): LoginProvider {
  const display = "Microsoft"
  const graph = settings.graphUrl ?? "https://graph.microsoft.com"
  const authority = `${settings.url}/${encodeURIComponent(settings.tenant ?? "common")}/oauth2/v2.0`
  return {
    segment: "microsoftonline",
    display,
    ...codeExchange(display, settings, {
      redirectUri: `${callbackUrl}/auth/microsoftonline/callback`,
      authorizeUrl: `${authority}/authorize`,
      tokenUrl: `${authority}/token`,
      // Graph's scopes named with Graph's own address, so that a sovereign cloud's Graph issues the token.
      scopes: ["openid", "profile", "email", `${graph}/User.Read`, `${graph}/GroupMember.Read.All`],
    }),
    async user(accessToken) {
      const [me, memberships] = await Promise.all([
        providerJson(display, `${graph}/v1.0/me?$select=id,displayName,mail,userPrincipalName`, accessToken),
        pagedList(
          display,
          `${graph}/v1.0/me/memberOf?$select=id,displayName`,
          accessToken,
          (body) => {
            const value = (body as { value?: unknown } | null)?.value
            if (!Array.isArray(value))
              throw providerFailed(`${display} Graph answered /me/memberOf without a value list`)
            return value
          },
          ({ body }) => field(body, "@odata.nextLink") || undefined,
        ),
      ])
      const principal = field(me.body, "userPrincipalName")
      // memberOf lists directory roles and administrative units too; only groups are Groups.
      const groups = memberships.filter((entry) => field(entry, "@odata.type") === "#microsoft.graph.group")
      return {
        UserID: field(me.body, "id"),
        NickName: principal,
        Name: field(me.body, "displayName") || principal,
        Email: field(me.body, "mail") || principal,
        Provider: "microsoftonline",
        Organizations: [],
        Groups: [
          ...new Set(
            groups.flatMap((group) => [field(group, "id"), field(group, "displayName")]).filter((v) => v !== ""),
          ),
        ],
      }
    },
  }
}
