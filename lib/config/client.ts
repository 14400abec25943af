import { badRequest } from "../core/errors.ts"
import { defaultAuthConfigPath, readAuthConfig, storedToken } from "./auth-config.ts"
import { type CommandLine, deepFreeze, type FlagSpec, hostEnvironment, readFlags } from "./flags.ts"

/** The flags of every client command (contract.md section 3). */
export const clientFlags: readonly FlagSpec[] = [
  {
    name: "server-url",
    short: "s",
    value: "URL",
    defaultValue: "http://127.0.0.1:8080",
    description: "the runnel server; user:password@ in it is sent as Basic auth",
  },
  { name: "auth-token", value: "TOKEN", description: "a token sent as Bearer auth" },
  {
    name: "auth-config",
    short: "c",
    value: "FILE",
    description: "where runnel login keeps tokens; default ~/.runnel/auth.config",
  },
]

/** Where a client command sends its requests, and how it authenticates. */
export type ClientSettings = {
  /** The server's URL without credentials or a trailing slash, for requests and messages. */
  readonly url: string
  /**
   * The `Authorization` header, in interface.md's order: Bearer from --auth-token,
   * else Bearer from the auth config's entry for the URL, else Basic from the URL's user:password@.
   */
  readonly authorization: string | undefined
  /** The auth config file `runnel login` writes and this command read. */
  readonly authConfigPath: string
  /** Said on stderr before the command runs (an auth config others may read). */
  readonly warnings: readonly string[]
}

/** A client command's settings from its command line and environment, checked and frozen. */
export function clientSettings(cli: CommandLine, env: NodeJS.ProcessEnv = process.env): ClientSettings {
  const flags = readFlags(clientFlags, cli, env)
  const given = String(flags["server-url"])
  let base: URL
  try {
    base = new URL(given)
  } catch {
    throw badRequest(`--server-url "${given}" is not a URL; write it as http://host:8080`)
  }
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw badRequest(`--server-url "${given}" must start with http:// or https://`)
  }
  const user =
    base.username === "" && base.password === ""
      ? undefined
      : `${decodeURIComponent(base.username)}:${decodeURIComponent(base.password)}`
  base.username = ""
  base.password = ""
  const url = base.toString().replace(/\/$/, "")
  const configFlag = flags["auth-config"]
  const authConfigPath =
    typeof configFlag === "string" && configFlag !== "" ? configFlag : defaultAuthConfigPath(hostEnvironment(env).home)
  const token = flags["auth-token"]
  if (typeof token === "string" && token !== "") {
    return deepFreeze({ url, authorization: `Bearer ${token}`, authConfigPath, warnings: [] })
  }
  const { config, warning } = readAuthConfig(authConfigPath)
  const warnings = warning === undefined ? [] : [warning]
  const stored = storedToken(config, url)
  const authorization =
    stored !== undefined
      ? `Bearer ${stored}`
      : user === undefined
        ? undefined
        : `Basic ${Buffer.from(user).toString("base64")}`
  return deepFreeze({ url, authorization, authConfigPath, warnings })
}
