import type { OperatorSettings, RoleSettings } from "../lib/config/operator.ts"
import type { KubeConfig } from "../lib/kube/client-node.js"
import { openKubernetesSecretStore } from "../lib/kube/kubernetes-secret-store.ts"
import { globalScope, type SecretStore } from "../lib/secrets/secret-store.ts"
import { openSqliteSecretStore } from "../lib/secrets/sqlite-secret-store.ts"

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
