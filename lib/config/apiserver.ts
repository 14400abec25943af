import { authFlags, authWarnings } from "./auth.ts"
import { type CommandLine, deepFreeze, type FlagSpec, hostEnvironment, readFlags } from "./flags.ts"
import { allowedDriverNames, type RoleSettings, rolePart } from "./operator.ts"
import { type ApiSettings, apiPart, type HttpSettings, httpPart, serverFlags } from "./server.ts"

/** The API flags of `runnel server`, without the operator's own (in-flight limit, sandbox limits, secrets). */
const apiserverFlagNames = [
  "port",
  "host",
  "metrics-port",
  "kubeconfig",
  "namespace",
  "storage-sqlite-path",
  "driver",
  "allowed-drivers",
  "max-queue-size",
  "max-body-mb",
  "allowed-features",
  "webhook-timeout",
  "webhook-max-age",
  "mcp-allow-actions",
  "secrets-sqlite-path",
  "secrets-sqlite-passphrase",
  "secrets-backend",
  "secrets-kubernetes-global-secret",
  "secrets-s3-bucket",
  "secrets-s3-endpoint",
  "secrets-s3-region",
  "secrets-s3-access-key-id",
  "secrets-s3-secret-access-key",
  "secrets-s3-passphrase",
  "secrets-s3-encrypt",
  "secrets-s3-kms-key-id",
  "secrets-s3-sse-c-key",
  "secrets-s3-prefix",
  ...authFlags.map((flag) => flag.name),
]
export const apiserverFlags: readonly FlagSpec[] = serverFlags
  .filter((flag) => apiserverFlagNames.includes(flag.name))
  .map((flag) =>
    flag.name === "storage-sqlite-path"
      ? {
          ...flag,
          description:
            "where the operator stores run output, as its --storage-sqlite-path: runnel.db reads runnel-logs.db (:memory: for none)",
        }
      : flag.name === "kubeconfig"
        ? {
            ...flag,
            description:
              "kubeconfig of the Kubernetes API to serve; without it $KUBECONFIG or ~/.kube/config, or in a Pod the in-cluster account",
          }
        : flag,
  )

/** `runnel apiserver`: the API role alone. */
export type ApiServerSettings = RoleSettings & {
  readonly http: HttpSettings
  readonly api: ApiSettings
  readonly warnings: readonly string[]
}

/** `runnel apiserver`'s settings from its command line and environment, checked and frozen. */
export function apiserverSettings(
  cli: CommandLine,
  driverNames: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): ApiServerSettings {
  const flags = readFlags(apiserverFlags, cli, env)
  const api = apiPart(flags)
  return deepFreeze({
    ...rolePart(flags, "apiserver", driverNames, hostEnvironment(env), api.auth.mode !== "open"),
    http: httpPart(flags),
    api,
    warnings: authWarnings(api.auth, allowedDriverNames(flags)),
  })
}
