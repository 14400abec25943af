import { badRequest } from "../core/errors.ts"
import { type AuthSettings, authFlags, authPart, authWarnings } from "./auth.ts"
import {
  type CommandLine,
  deepFreeze,
  type FlagSpec,
  type FlagValues,
  hostEnvironment,
  parseDurationFlag,
  parsePositiveInt,
  parseSwitch,
  readFlags,
} from "./flags.ts"
import { allowedDriverNames, metricsPortFlag, type OperatorSettings, operatorFlags, operatorPart } from "./operator.ts"

/** Where the process serves HTTP. */
export type HttpSettings = {
  readonly port: number
  readonly host: string
  /** `--tls-cert-file` and `--tls-private-key-file`: serve HTTPS only, with this certificate (PEM files). */
  readonly tls?: { readonly certFile: string; readonly keyFile: string }
}

/** The API server's own limits. */
export type ApiSettings = {
  /** Queued runs beyond which triggers answer 503. */
  readonly maxQueueSize: number
  readonly maxBodyBytes: number
  readonly webhookTimeoutMs: number
  readonly webhookMaxAgeMs: number
  /** MCP clients may trigger pipelines and stop runs (audited); without it MCP only reads. */
  readonly mcpAllowActions: boolean
  /** Who may use the server and what they may see. */
  readonly auth: AuthSettings
}

export const serverFlags: readonly FlagSpec[] = [
  { name: "port", value: "PORT", defaultValue: "8080", description: "port to serve on; 0 takes a free one" },
  { name: "host", value: "HOST", defaultValue: "127.0.0.1", description: "address to serve on" },
  metricsPortFlag,
  {
    name: "tls-cert-file",
    value: "FILE",
    description:
      "serve HTTPS only (the API, the UI, /k8s and the probes) with this PEM certificate (chain); without it, with authentication on, TLS is also spoken on the same port with a certificate from runnel's own authority, for kubectl (docs/auth.md)",
  },
  { name: "tls-private-key-file", value: "FILE", description: "the PEM private key of --tls-cert-file" },
  ...operatorFlags,
  {
    name: "max-queue-size",
    value: "N",
    defaultValue: "100",
    description: "queued runs beyond which triggers answer 503",
  },
  { name: "max-body-mb", value: "MB", defaultValue: "10", description: "largest request body the API accepts" },
  {
    name: "webhook-timeout",
    value: "DURATION",
    defaultValue: "5s",
    description: "how long a webhook waits for the pipeline's http.respond() before it is answered 202",
  },
  {
    name: "webhook-max-age",
    value: "DURATION",
    defaultValue: "5m",
    description: "Slack and Stripe webhooks signed longer ago than this are refused as replays",
  },
  {
    name: "mcp-allow-actions",
    description:
      "MCP clients may also trigger pipelines and stop runs (trigger_pipeline, stop_run), under the same access rules as REST and audited; without it MCP only reads",
  },
  ...authFlags,
]

/** `runnel server`: both roles in one process, and where it serves; `warnings` are said on stderr at start. */
export type ServerSettings = OperatorSettings & {
  readonly http: HttpSettings
  readonly api: ApiSettings
  readonly warnings: readonly string[]
}

/** `runnel server`'s settings from its command line and environment, checked and frozen. */
export function serverSettings(
  cli: CommandLine,
  driverNames: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): ServerSettings {
  const flags = readFlags(serverFlags, cli, env)
  const api = apiPart(flags)
  return deepFreeze({
    ...operatorPart(flags, "server", driverNames, hostEnvironment(env), api.auth.mode !== "open"),
    http: httpPart(flags),
    api,
    warnings: authWarnings(api.auth, allowedDriverNames(flags)),
  })
}

/** --port and --host (and the TLS files where the command has them), checked. */
export function httpPart(flags: FlagValues): HttpSettings {
  const port = flags.port === "0" ? 0 : parsePositiveInt(flags.port as string, "port")
  const host = String(flags.host)
  const given = (name: string) => (typeof flags[name] === "string" && flags[name] !== "" ? flags[name] : undefined)
  const certFile = given("tls-cert-file")
  const keyFile = given("tls-private-key-file")
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw badRequest(
      `--tls-cert-file and --tls-private-key-file go together; --${certFile === undefined ? "tls-cert-file" : "tls-private-key-file"} is missing`,
    )
  }
  return certFile === undefined || keyFile === undefined ? { port, host } : { port, host, tls: { certFile, keyFile } }
}

/** The API server's flags, checked. */
export function apiPart(flags: FlagValues): ApiSettings {
  return {
    maxQueueSize: parsePositiveInt(flags["max-queue-size"] as string, "max-queue-size"),
    maxBodyBytes: parsePositiveInt(flags["max-body-mb"] as string, "max-body-mb") * 1024 * 1024,
    webhookTimeoutMs: parseDurationFlag(flags["webhook-timeout"] as string, "webhook-timeout"),
    webhookMaxAgeMs: parseDurationFlag(flags["webhook-max-age"] as string, "webhook-max-age"),
    mcpAllowActions: parseSwitch(flags["mcp-allow-actions"] as string | undefined, "mcp-allow-actions"),
    auth: authPart(flags),
  }
}
