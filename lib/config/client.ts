import { badRequest } from "../core/errors.ts"
import { type CommandLine, deepFreeze, type FlagSpec, readFlags } from "./flags.ts"

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
]

/** Where a client command sends its requests, and how it authenticates. */
export type ClientSettings = {
  /** The server's URL without credentials or a trailing slash, for requests and messages. */
  readonly url: string
  /** The `Authorization` header: Bearer from --auth-token, else Basic from the URL's user:password@. */
  readonly authorization: string | undefined
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
  let authorization: string | undefined
  const token = flags["auth-token"]
  if (typeof token === "string" && token !== "") {
    authorization = `Bearer ${token}`
  } else if (base.username !== "" || base.password !== "") {
    const user = `${decodeURIComponent(base.username)}:${decodeURIComponent(base.password)}`
    authorization = `Basic ${Buffer.from(user).toString("base64")}`
  }
  base.username = ""
  base.password = ""
  return deepFreeze({ url: base.toString().replace(/\/$/, ""), authorization })
}
