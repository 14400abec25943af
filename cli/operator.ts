import type { OperatorSettings } from "../lib/config/operator.ts"
import type { KubeConfig } from "../lib/kube/client-node.js"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import type { OperatorMetrics } from "../lib/metrics/metrics.ts"
import { runSecrets, type SecretStore } from "../lib/secrets/secret-store.ts"
import { refusePrivileged } from "../operator/drivers/refuse-privileged.ts"
import { type Operator, startOperator } from "../operator/operator.ts"
import { drivers } from "./drivers.ts"
import { loadKubeConfig } from "./kubeconfig.ts"
import { processLog } from "./log.ts"
import { processMetricsOf, serveMetrics } from "./metrics-server.ts"
import { openConfiguredSecretStore } from "./secret-backend.ts"
import { onShutdownSignal } from "./shutdown-signal.ts"

/** `runnel operator`: the operator alone, against the Kubernetes API its settings resolved. */
export async function operator(settings: OperatorSettings): Promise<void> {
  const kubeConfig = loadKubeConfig(settings.kube)
  const metrics = await processMetricsOf(settings.metrics)
  const store = await openSqliteLogStore(settings.logStorePath, metrics?.logBytes())
  let secretStore: SecretStore | undefined
  let metricsServer: Awaited<ReturnType<typeof serveMetrics>> | undefined
  let operator: Operator
  try {
    if (metrics !== undefined && settings.metrics !== undefined)
      metricsServer = await serveMetrics(metrics, settings.metrics)
    secretStore = await openConfiguredSecretStore(settings, kubeConfig)
    operator = await startConfiguredOperator(settings, kubeConfig, store, secretStore, metrics?.operator())
  } catch (error) {
    await metricsServer?.close()
    await secretStore?.close()
    await store.close()
    throw error
  }
  process.stderr.write(
    `runnel: operator reconciling namespace "${settings.namespace}" at ${kubeConfig.getCurrentCluster()?.server}\n`,
  )
  onShutdownSignal(async (now) => {
    await operator.stop(now ? 0 : settings.shutdownGraceMs)
    await metricsServer?.close()
    await secretStore.close()
    await store.close()
  })
}

const privilegedHint =
  "start runnel server (or runnel operator) with --allow-privileged-tasks (CI_ALLOW_PRIVILEGED_TASKS=true) to allow it"

/** The composition of the operator role: the registry's drivers, the secret store, the settings' limits. */
export function startConfiguredOperator(
  settings: OperatorSettings,
  kubeConfig: KubeConfig,
  store: LogStore,
  secretStore: SecretStore,
  metrics?: OperatorMetrics,
): Promise<Operator> {
  return startOperator({
    ...(metrics === undefined ? {} : { metrics }),
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
    drivers: async (name, config) => {
      const factory = await drivers.get(name).load(settings.host, {
        kubeConfig,
        namespace: settings.namespace,
        taskVolumes: settings.taskVolumes,
      })
      const driver = factory.create(config)
      return settings.allowPrivilegedTasks ? driver : refusePrivileged(driver, privilegedHint)
    },
    defaultDriver: settings.driver,
    allowedDrivers: settings.allowedDrivers,
    maxInFlight: settings.maxInFlight,
    keepRuns: settings.keepRuns,
    limits: settings.limits,
    mockImage: settings.mockImage,
    network: settings.network,
    log: processLog(),
  })
}
