import { chmodSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { badRequest, errorMessage } from "../core/errors.ts"

/**
 * The CLI's stored logins (interface.md "Login"): `~/.runnel/auth.config`,
 * JSON `{servers: {<server url>: {token}}}`, mode 0600 because each token
 * acts as its user for 30 days.
 */
export type AuthConfig = { readonly servers: Readonly<Record<string, { readonly token: string }>> }

export const defaultAuthConfigPath = (home: string) => join(home, ".runnel", "auth.config")

/**
 * The file's logins (none when it does not exist), and a warning when others
 * may read it. A file that is not the JSON above is an error naming the file:
 * guessing would send the wrong token, or none, without a word.
 */
export function readAuthConfig(path: string): { config: AuthConfig; warning?: string } {
  let text: string
  let mode: number
  try {
    text = readFileSync(path, "utf8")
    mode = statSync(path).mode & 0o777
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { config: { servers: {} } }
    throw badRequest(`cannot read the auth config ${path}: ${errorMessage(error)}`)
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    throw badRequest(`the auth config ${path} is not JSON; delete it and run runnel login again`)
  }
  const servers = (parsed as { servers?: unknown } | null)?.servers
  if (typeof servers !== "object" || servers === null || Array.isArray(servers)) {
    throw badRequest(`the auth config ${path} has no "servers" object; delete it and run runnel login again`)
  }
  const config = { servers: servers as AuthConfig["servers"] }
  if ((mode & 0o077) === 0) return { config }
  return {
    config,
    warning: `runnel: WARNING: ${path} is readable by others (mode ${mode.toString(8).padStart(4, "0")}); its tokens log in as you: chmod 600 ${path}`,
  }
}

/** The stored token for a server URL (without credentials or a trailing slash), if any. */
export function storedToken(config: AuthConfig, url: string): string | undefined {
  const token = config.servers[url]?.token
  return typeof token === "string" && token !== "" ? token : undefined
}

/** Stores (or, with undefined, removes) a server's token: written whole, mode 0600 from the first byte. */
export function saveToken(path: string, url: string, token: string | undefined): void {
  const { config } = readAuthConfig(path)
  const servers: Record<string, { token: string }> = { ...config.servers }
  if (token === undefined) delete servers[url]
  else servers[url] = { token }
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
  const temporary = `${path}.${process.pid}.tmp`
  writeFileSync(temporary, `${JSON.stringify({ servers }, null, 2)}\n`, { mode: 0o600 })
  // The mode of an existing file survives a rename onto it only if we set it; 0600 whatever was there.
  chmodSync(temporary, 0o600)
  renameSync(temporary, path)
}
