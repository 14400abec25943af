import { setTimeout as sleep } from "node:timers/promises"
import { readAuthConfig, saveToken, storedToken } from "../lib/config/auth-config.ts"
import type { ClientSettings } from "../lib/config/client.ts"
import { type ApiClient, apiClient, ServerRefused } from "./api-client.ts"

// `runnel login`, `runnel logout` and `runnel whoami` (interface.md "Login"). The login is the device
// authorization grant (RFC 8628) the server serves at /auth/device: this command never opens a browser
// (a headless machine has none); it prints where to go and waits.

const deviceGrantType = "urn:ietf:params:oauth:grant-type:device_code"

type DeviceAuthorization = {
  device_code: string
  user_code: string
  verification_uri: string
  verification_uri_complete?: string
  expires_in: number
  interval?: number
}

/** Asks for a device code, shows it, polls until a person approves it in a browser, and stores the token. */
export async function login(api: ApiClient, settings: ClientSettings): Promise<void> {
  const { body } = await api.oauth("/auth/device/code", { client_id: "runnel-cli" })
  const grant = body as DeviceAuthorization
  if (typeof grant?.device_code !== "string" || typeof grant.user_code !== "string") {
    throw new ServerRefused(502, `${api.url} answered /auth/device/code without a device code; is it a runnel server?`)
  }
  process.stdout.write(
    `To log in to ${api.url}, open ${grant.verification_uri} in a browser and enter the code\n\n    ${grant.user_code}\n\n` +
      (grant.verification_uri_complete === undefined ? "" : `(or open ${grant.verification_uri_complete})\n`) +
      `Waiting for the approval (the code expires in ${Math.round(grant.expires_in / 60)} minutes)...\n`,
  )
  let intervalMs = (grant.interval ?? 5) * 1000
  for (;;) {
    await sleep(intervalMs)
    const answer = await api.oauth("/auth/device/token", {
      grant_type: deviceGrantType,
      device_code: grant.device_code,
      client_id: "runnel-cli",
    })
    const { access_token: token, error, error_description: description } = answer.body as Record<string, unknown>
    if (answer.status === 200 && typeof token === "string") {
      saveToken(settings.authConfigPath, settings.url, token)
      // Asked with the new token, not with whatever credentials this command started with.
      const { body: me } = await apiClient({ ...settings, authorization: `Bearer ${token}` }).call("GET", "/api/me")
      process.stdout.write(
        `Logged in to ${api.url} as ${(me as { actor?: unknown }).actor}; the token is in ${settings.authConfigPath}\n`,
      )
      return
    }
    if (error === "authorization_pending") continue
    if (error === "slow_down") {
      // RFC 8628 section 3.5: five seconds more, for this and every later poll.
      intervalMs += 5000
      continue
    }
    const why =
      error === "expired_token"
        ? "the code expired before it was approved"
        : error === "access_denied"
          ? "the login was denied in the browser"
          : typeof description === "string"
            ? description
            : `the server answered ${JSON.stringify(answer.body)}`
    throw new ServerRefused(answer.status, `login to ${api.url} failed: ${why}; run runnel login again`)
  }
}

/** Forgets the server's token in the auth config (runnel's tokens are not revocable: they expire). */
export function logout(settings: ClientSettings): void {
  const stored = storedToken(readAuthConfig(settings.authConfigPath).config, settings.url)
  if (stored === undefined) {
    process.stdout.write(`No login for ${settings.url} in ${settings.authConfigPath}\n`)
    return
  }
  saveToken(settings.authConfigPath, settings.url, undefined)
  process.stdout.write(`Logged out of ${settings.url}: its token is removed from ${settings.authConfigPath}\n`)
}

/** Who the server takes this command's credentials for (GET /api/me). */
export async function whoami(api: ApiClient, json: boolean): Promise<void> {
  const { body } = await api.call("GET", "/api/me")
  const me = body as Record<string, unknown>
  if (json) {
    process.stdout.write(`${JSON.stringify(me, null, 2)}\n`)
    return
  }
  const lines = [
    `actor:         ${me.actor}`,
    ...(me.authenticated === true
      ? [
          `name:          ${me.Name}`,
          `email:         ${me.Email}`,
          `provider:      ${me.Provider}`,
          `user id:       ${me.UserID}`,
          `organizations: ${(me.Organizations as string[]).join(", ")}`,
          `groups:        ${(me.Groups as string[]).join(", ")}`,
        ]
      : ["(this server has no authentication: everyone is anonymous)"]),
  ]
  process.stdout.write(`${lines.join("\n")}\n`)
}
