import { AccessPolicy } from "../apiserver/access.ts"
import { startApiServer } from "../apiserver/app.ts"
import { authenticator } from "../apiserver/auth/authenticate.ts"
import type { FailureCounter } from "../apiserver/auth/failure-counter.ts"
import { loginProviders } from "../apiserver/auth/login-providers.ts"
import type { ApiServerSettings } from "../lib/config/apiserver.ts"
import type { RoleSettings } from "../lib/config/operator.ts"
import type { ApiSettings } from "../lib/config/server.ts"
import type { KubeConfig } from "../lib/kube/client-node.js"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import type { ApiMetrics } from "../lib/metrics/metrics.ts"
import type { SecretStore } from "../lib/secrets/secret-store.ts"
import { drivers } from "./drivers.ts"
import { httpFront, listen, urlHost, warnOpenAccess } from "./http-server.ts"
import { loadKubeConfig } from "./kubeconfig.ts"
import { processLog } from "./log.ts"
import { processMetricsOf, serveMetrics } from "./metrics-server.ts"
import { openSecretBackend } from "./secret-backend.ts"
import { onShutdownSignal } from "./shutdown-signal.ts"

/**
 * `runnel apiserver`: the REST API alone, against the Kubernetes API its
 * settings resolved. Like `runnel server` it listens first and says it is
 * ready once its stores and the API are up.
 */
export async function apiserver(settings: ApiServerSettings): Promise<void> {
  const policy = accessPolicy(settings.api)
  // The log store's writer thread comes online while this thread listens and loads the kubeconfig.
  const opening = openSqliteLogStore(settings.logStorePath)
  opening.catch(() => {}) // awaited below: a failure that comes first is not an unhandled rejection
  const front = httpFront()
  const metrics = await processMetricsOf(settings.metrics)
  let metricsServer: Awaited<ReturnType<typeof serveMetrics>> | undefined
  let secretStore: SecretStore | undefined
  let api: Awaited<ReturnType<typeof configuredApiServer>> | undefined
  const close = async () => {
    front.drain()
    await api?.stop()
    await metricsServer?.close()
    await front.close()
    await secretStore?.close()
    await (await opening.catch(() => undefined))?.close()
  }
  try {
    const address = await listen(front.http, settings.http.port, settings.http.host)
    if (metrics !== undefined && settings.metrics !== undefined)
      metricsServer = await serveMetrics(metrics, settings.metrics)
    const kubeConfig = loadKubeConfig(settings.kube)
    const store = await opening
    // The operator stores the server's --secret values; the API server only opens the store.
    secretStore = await openSecretBackend(settings, kubeConfig)
    api = await configuredApiServer(settings, kubeConfig, {
      policy,
      logs: store,
      secrets: secretStore,
      draining: () => front.phase === "draining",
      ...(metrics === undefined ? {} : { metrics: metrics.api() }),
    })
    front.ready(api.callback)
    if (settings.api.auth.mode === "open") warnOpenAccess(settings.http.host)
    process.stdout.write(
      `runnel: listening on http://${urlHost(settings.http.host)}:${address.port} (Kubernetes API ${kubeConfig.getCurrentCluster()?.server}, namespace "${settings.namespace}")\n`,
    )
  } catch (error) {
    await close().catch(() => {})
    throw error
  }
  onShutdownSignal(close)
}

/** The access rules of the settings: a --server-rbac that does not compile stops the start here, before anything opens. */
export function accessPolicy(api: ApiSettings): AccessPolicy {
  return new AccessPolicy({
    serverRbac: api.auth.serverRbac,
    kubernetesAdmins: api.auth.kubernetesAdmins,
    log: processLog(),
  })
}

/** The API server of the settings, with this process's logs: diagnostics on stderr, audit entries as JSON lines on stdout. */
export function configuredApiServer(
  settings: RoleSettings & { readonly api: ApiSettings },
  kubeConfig: KubeConfig,
  parts: {
    policy: AccessPolicy
    logs: LogStore
    secrets: SecretStore
    /** True once the process shuts down. */
    draining: () => boolean
    /** The embedded API's annotation of who changed an object (runnel server). */
    authorAnnotation?: string
    /** One count of failed credentials for the API and /k8s (runnel server). */
    failures?: FailureCounter
    /** The process's metrics, with --metrics-port. */
    metrics?: ApiMetrics
  },
): ReturnType<typeof startApiServer> {
  return startApiServer({
    ...parts,
    kubeConfig,
    namespace: settings.namespace,
    defaultDriver: settings.driver,
    allowedDrivers: settings.allowedDrivers === "*" ? drivers.names() : settings.allowedDrivers,
    features: settings.features,
    ...settings.api,
    authenticate: authenticator(settings.api.auth),
    authMode: settings.api.auth.mode,
    ...loginOf(settings.api.auth),
    log: processLog(),
    // One JSON line per entry on stdout, apart from the diagnostics on stderr (docs/decisions.md).
    audit: ({ event, ...fields }) =>
      process.stdout.write(
        `${JSON.stringify({ time: new Date().toISOString(), level: "info", kind: "audit", msg: event, ...fields })}\n`,
      ),
  })
}

/** The browser and device login of OAuth mode; none in the other modes. */
function loginOf(auth: ApiSettings["auth"]) {
  if (auth.mode !== "oauth") return {}
  return {
    login: {
      sessionSecret: auth.sessionSecret,
      callbackUrl: auth.callbackUrl,
      providers: loginProviders(auth.callbackUrl, auth.providers),
    },
  }
}
