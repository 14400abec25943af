import { badRequest } from "../core/errors.ts"
import type { FlagSpec, FlagValues } from "./flags.ts"

/** The OAuth providers of contract.md section 1, by the name their flags use. */
export const oauthProviderNames = ["github", "gitlab", "microsoft"] as const
export type OAuthProviderName = (typeof oauthProviderNames)[number]

/** One enabled provider: both its client id and secret are set. */
export type OAuthProvider = {
  readonly name: OAuthProviderName
  readonly clientId: string
  readonly clientSecret: string
  /**
   * Where the provider lives: github.com or a GitHub Enterprise Server, gitlab.com or a
   * self-hosted GitLab, Microsoft's login authority (a sovereign cloud's, or a local stand-in in tests).
   */
  readonly url: string
  /** Microsoft only: the directory (tenant) users sign in to. */
  readonly tenant?: string
  /** Microsoft only: where Microsoft Graph answers for that authority. */
  readonly graphUrl?: string
}

/** Who may use the server: interface.md's "Authentication", one mode at a time. */
export type AuthSettings = (
  | { readonly mode: "open" }
  | { readonly mode: "basic"; readonly username: string; readonly password: string }
  | {
      readonly mode: "oauth"
      /** Signs JWTs (HS256, its UTF-8 bytes as the key) and encrypts session cookies. */
      readonly sessionSecret: string
      /** The server's public base URL; provider callbacks are `<callbackUrl>/auth/<segment>/callback`. */
      readonly callbackUrl: string
      readonly providers: readonly OAuthProvider[]
    }
) & {
  /** `--server-rbac`: authenticated users who fail it get 403 everywhere (compiled by the API server). */
  readonly serverRbac?: string
  /** `--k8s-admin-rbac`: the users the embedded Kubernetes API at /k8s answers; without it /k8s answers 403. */
  readonly kubernetesAdmins?: string
}

const providerFlags = (name: OAuthProviderName, display: string): FlagSpec[] => [
  { name: `oauth-${name}-client-id`, value: "ID", description: `${display} OAuth application's client id` },
  { name: `oauth-${name}-client-secret`, value: "SECRET", description: `${display} OAuth application's client secret` },
]

export const authFlags: readonly FlagSpec[] = [
  { name: "basic-auth-username", value: "USER", description: "Basic Auth: the one user name (with its password)" },
  { name: "basic-auth-password", value: "PASSWORD", description: "Basic Auth: that user's password" },
  ...providerFlags("github", "GitHub"),
  {
    name: "oauth-github-url",
    value: "URL",
    defaultValue: "https://github.com",
    description: "GitHub's address: a GitHub Enterprise Server's URL instead of github.com",
  },
  ...providerFlags("gitlab", "GitLab"),
  {
    name: "oauth-gitlab-url",
    value: "URL",
    defaultValue: "https://gitlab.com",
    description: "GitLab's address: a self-hosted instance instead of gitlab.com",
  },
  ...providerFlags("microsoft", "Microsoft Entra ID"),
  {
    name: "oauth-microsoft-tenant",
    value: "TENANT",
    defaultValue: "common",
    description: "Microsoft Entra ID tenant (directory id or domain) users sign in to",
  },
  {
    name: "oauth-microsoft-authority",
    value: "URL",
    defaultValue: "https://login.microsoftonline.com",
    description: "Microsoft's login authority: a sovereign cloud's instead of the global one",
  },
  {
    name: "oauth-microsoft-graph-url",
    value: "URL",
    defaultValue: "https://graph.microsoft.com",
    description: "Microsoft Graph for that authority, where a user's groups are read",
  },
  {
    name: "oauth-session-secret",
    value: "SECRET",
    description: "signs JWTs and encrypts session cookies; a random string of 32+ characters",
  },
  {
    name: "oauth-callback-url",
    value: "URL",
    description:
      "the server's public base URL, no trailing path; providers call back to <URL>/auth/<provider>/callback",
  },
  {
    name: "server-rbac",
    value: "EXPR",
    description: "CEL expression every authenticated user must match, else 403 everywhere",
  },
  {
    name: "k8s-admin-rbac",
    value: "EXPR",
    description:
      "CEL expression of the users the embedded Kubernetes API at /k8s answers (kubectl); without it /k8s answers 403 when authentication is on",
  },
]

/** The authentication flags, checked: one mode, and everything that mode needs. */
export function authPart(flags: FlagValues): AuthSettings {
  const given = (name: string) => {
    const value = flags[name]
    return typeof value === "string" && value !== "" ? value : undefined
  }
  const rules = {
    ...(given("server-rbac") === undefined ? {} : { serverRbac: given("server-rbac") as string }),
    ...(given("k8s-admin-rbac") === undefined ? {} : { kubernetesAdmins: given("k8s-admin-rbac") as string }),
  }
  const providers = oauthProviderNames.flatMap((name): OAuthProvider[] => {
    const clientId = given(`oauth-${name}-client-id`)
    const clientSecret = given(`oauth-${name}-client-secret`)
    if (clientId === undefined || clientSecret === undefined) return []
    if (name !== "microsoft") return [{ name, clientId, clientSecret, url: baseUrl(flags, `oauth-${name}-url`) }]
    return [
      {
        name,
        clientId,
        clientSecret,
        url: baseUrl(flags, "oauth-microsoft-authority"),
        tenant: String(flags["oauth-microsoft-tenant"]),
        graphUrl: baseUrl(flags, "oauth-microsoft-graph-url"),
      },
    ]
  })
  const username = given("basic-auth-username")
  const password = given("basic-auth-password")
  if ((username === undefined) !== (password === undefined)) {
    throw badRequest(
      `--basic-auth-username and --basic-auth-password go together; --${username === undefined ? "basic-auth-username" : "basic-auth-password"} is missing`,
    )
  }
  if (username !== undefined && providers.length > 0) {
    throw badRequest(
      `Basic Auth (--basic-auth-username) and OAuth (--oauth-${providers[0]?.name}-client-id) are both configured; they are mutually exclusive: choose one`,
    )
  }
  if (username !== undefined && password !== undefined) return { mode: "basic", username, password, ...rules }
  if (providers.length === 0) return { mode: "open", ...rules }
  const sessionSecret = given("oauth-session-secret")
  const callbackUrl = given("oauth-callback-url")
  for (const [flag, value] of [
    ["oauth-session-secret", sessionSecret],
    ["oauth-callback-url", callbackUrl],
  ] as const) {
    if (value === undefined) {
      throw badRequest(`OAuth is configured (${providers.map((p) => p.name).join(", ")}) but --${flag} is missing`)
    }
  }
  return {
    mode: "oauth",
    sessionSecret: sessionSecret as string,
    callbackUrl: checkedUrl(callbackUrl as string, "oauth-callback-url").replace(/\/+$/, ""),
    providers,
    ...rules,
  }
}

const baseUrl = (flags: FlagValues, name: string) => checkedUrl(String(flags[name]), name).replace(/\/+$/, "")

function checkedUrl(text: string, flag: string): string {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw badRequest(`--${flag} ${JSON.stringify(text)} is not a URL; give one like https://runnel.example.com`)
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw badRequest(`--${flag} must be an http or https URL, not ${url.protocol}`)
  }
  return text
}

/** Advised length of --oauth-session-secret (interface.md "Limits"). */
export const advisedSecretChars = 32

/** What the serving roles say on stderr at start about their authentication (`allowedDrivers` as given). */
export function authWarnings(auth: AuthSettings, allowedDrivers: readonly string[]): string[] {
  const warnings: string[] = []
  if (auth.mode === "oauth" && [...auth.sessionSecret].length < advisedSecretChars) {
    warnings.push(
      `runnel: WARNING: --oauth-session-secret is ${[...auth.sessionSecret].length} characters; it signs every token, so use a random string of ${advisedSecretChars} or more (openssl rand -base64 32)`,
    )
  }
  if (auth.mode !== "open" && allowedDrivers.includes("native")) {
    warnings.push(
      "runnel: WARNING: --allowed-drivers names native with authentication on: every user who may store a pipeline can run processes as this server's own user on this host, whatever RBAC says",
    )
  }
  if (auth.mode === "open" && auth.serverRbac !== undefined) {
    warnings.push("runnel: WARNING: --server-rbac has no effect without authentication (Basic Auth or OAuth)")
  }
  return warnings
}
