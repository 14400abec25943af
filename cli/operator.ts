import type { KubeConfig } from "@kubernetes/client-node"
import type { OperatorSettings, RoleSettings } from "../lib/config/operator.ts"
import { errorMessage } from "../lib/core/errors.ts"
import { openKubernetesSecretStore } from "../lib/kube/kubernetes-secret-store.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { globalScope, runSecrets, type SecretStore } from "../lib/secrets/secret-store.ts"
import { openSqliteSecretStore } from "../lib/secrets/sqlite-secret-store.ts"
import { type Operator, startOperator } from "../operator/operator.ts"
import { drivers } from "./drivers.ts"
import { loadKubeConfig } from "./kubeconfig.ts"
import { processLog } from "./log.ts"

/** `runnel operator`: the operator alone, against the Kubernetes API its settings resolved. */
export async function operator(settings: OperatorSettings): Promise<void> {
  const kubeConfig = loadKubeConfig(settings.kube)
  const store = await openSqliteLogStore(settings.logStorePath)
  let secretStore: SecretStore | undefined
  let operator: Operator
  try {
    secretStore = await openConfiguredSecretStore(settings, kubeConfig)
    operator = await startConfiguredOperator(settings, kubeConfig, store, secretStore)
  } catch (error) {
    await secretStore?.close()
    await store.close()
    throw error
  }
  process.stderr.write(
    `runnel: operator reconciling namespace "${settings.namespace}" at ${kubeConfig.getCurrentCluster()?.server}\n`,
  )
  onShutdownSignal(async (now) => {
    await operator.stop(now ? 0 : settings.shutdownGraceMs)
    await secretStore.close()
    await store.close()
  })
}

/** The secret store of the settings, with the server's --secret values stored in its global scope. */
export async function openConfiguredSecretStore(
  settings: OperatorSettings,
  kubeConfig: KubeConfig,
): Promise<SecretStore> {
  const secrets = await openSecretBackend(settings, kubeConfig)
  try {
    if (Object.keys(settings.secrets).length > 0) await secrets.set(globalScope, settings.secrets)
  } catch (error) {
    await secrets.close()
    throw error
  }
  return secrets
}

/**
 * The secrets backend the settings choose: `--secrets-backend`, else S3 when
 * its bucket is set (interface.md: it takes precedence over the embedded SQL
 * one), else SQLite. Kubernetes Secrets are read through `kubeConfig`, the
 * client the operator uses.
 * The S3 SDK is loaded only when it is used.
 */
export async function openSecretBackend(
  settings: Pick<RoleSettings, "secretStore" | "s3Secrets" | "secretsBackend" | "kubernetesGlobalSecret" | "namespace">,
  kubeConfig: KubeConfig,
): Promise<SecretStore> {
  if (settings.secretsBackend === "kubernetes") {
    return openKubernetesSecretStore({
      kubeConfig,
      namespace: settings.namespace,
      globalSecret: settings.kubernetesGlobalSecret,
    })
  }
  const s3 = settings.s3Secrets
  if (settings.secretsBackend === "sqlite" || s3 === undefined) return openSqliteSecretStore(settings.secretStore)
  const { openS3SecretStore } = await import("../lib/secrets/s3-secret-store.ts")
  const store = await openS3SecretStore({
    bucket: s3.bucket,
    endpoint: s3.endpoint,
    region: s3.region,
    credentials: s3.credentials,
    passphrase: s3.passphrase,
    encryption:
      s3.encryption?.mode === "sse-c"
        ? { mode: "sse-c", customerKey: Buffer.from(s3.encryption.customerKey, "base64") }
        : s3.encryption,
    prefix: s3.prefix,
  })
  if (s3.passphrase === undefined) {
    process.stderr.write(
      `runnel: WARNING: secrets in bucket "${s3.bucket}" are stored without --secrets-s3-passphrase: their values rest only under the provider's encryption${s3.encryption === undefined ? " (none requested: see --secrets-s3-encrypt)" : ` (${s3.encryption.mode})`}, readable by anyone who can read the bucket\n`,
    )
  }
  return store
}

/** The composition of the operator role: the registry's drivers, the secret store, the settings' limits. */
export function startConfiguredOperator(
  settings: OperatorSettings,
  kubeConfig: KubeConfig,
  store: LogStore,
  secretStore: SecretStore,
): Promise<Operator> {
  return startOperator({
    kubeConfig,
    namespace: settings.namespace,
    store,
    secrets: runSecrets(secretStore, settings.features.includes("secrets")),
    webhooks: settings.features.includes("webhooks"),
    gates: settings.features.includes("gates"),
    schedules: settings.features.includes("schedules"),
    cronJobs:
      settings.schedules.mode === "cronjob"
        ? { image: settings.schedules.image, serviceAccount: settings.schedules.serviceAccount }
        : undefined,
    drivers: async (name, config) => (await drivers.get(name).load(settings.host)).create(config),
    defaultDriver: settings.driver,
    allowedDrivers: settings.allowedDrivers,
    maxInFlight: settings.maxInFlight,
    limits: settings.limits,
    mockImage: settings.mockImage,
    log: processLog(),
  })
}

/**
 * On SIGTERM or SIGINT, `shutdown(false)`: running runs may finish within the
 * grace period. A second signal calls `shutdown(true)`: abort them now.
 * Exits 0 once shut down.
 */
export function onShutdownSignal(shutdown: (now: boolean) => Promise<void>): void {
  let shuttingDown = false
  const onSignal = (signal: NodeJS.Signals) => {
    if (shuttingDown) {
      process.stderr.write(`runnel: ${signal} again: aborting the running runs now\n`)
      void shutdown(true)
      return
    }
    shuttingDown = true
    process.stderr.write(`runnel: ${signal}: shutting down; running runs may finish within --shutdown-grace\n`)
    shutdown(false).then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`runnel: shutdown failed: ${errorMessage(error)}\n`)
        process.exit(1)
      },
    )
  }
  process.on("SIGTERM", onSignal)
  process.on("SIGINT", onSignal)
}
