import { randomBytes } from "node:crypto"
import { join } from "node:path"
import type { startApiServer } from "../apiserver/app.ts"
import { FailureCounter } from "../apiserver/auth/failure-counter.ts"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import type { ServerSettings } from "../lib/config/server.ts"
import { changedByAnnotation } from "../lib/kube/resources.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import type { SecretStore } from "../lib/secrets/secret-store.ts"
import type { Operator } from "../operator/operator.ts"
import { accessPolicy, configuredApiServer } from "./apiserver.ts"
import { httpFront, listen, loopbackHost, urlHost, warnOpenAccess } from "./http-server.ts"
import { inProcessTransport } from "./in-process-transport.ts"
import { loadKubeConfig } from "./kubeconfig.ts"
import { kubernetesAccess } from "./kubernetes-access.ts"
import { processMetricsOf, serveMetrics } from "./metrics-server.ts"
import { startConfiguredOperator } from "./operator.ts"
import { openConfiguredSecretStore } from "./secret-backend.ts"
import { servedTls } from "./server-tls.ts"
import { onShutdownSignal } from "./shutdown-signal.ts"

const crdsDir = join(import.meta.dirname, "..", "crds")
const embeddedPrefix = "/k8s"

/**
 * One process: the embedded API (unless the settings name a cluster), the
 * operator talking to it in the Kubernetes protocol as it would to a cluster
 * (in process, without HTTP's framing: cli/in-process-transport.ts), and the API. It listens first, so the operator can reach the embedded API, and
 * says it is ready (the probes, the `listening on` line) only once everything
 * is up. Opened in order, closed in reverse.
 */
export async function server(settings: ServerSettings): Promise<void> {
  const policy = accessPolicy(settings.api)
  // One count of failed credentials for the API and /k8s alike.
  const failures = new FailureCounter()
  const serving = settings.kube.kind === "embedded"
  const tls = servedTls({
    http: settings.http,
    auth: settings.api.auth,
    embedded: serving,
    storagePath: settings.storagePath,
  })
  // The operator and the API server in this process reach the embedded API with this token, which nothing outside it knows.
  const processToken = randomBytes(32).toString("base64url")
  const access = serving
    ? kubernetesAccess({ auth: settings.api.auth, policy, failures, processToken, prefix: embeddedPrefix })
    : undefined
  // One registry for the whole process: both roles' series and the log store's on one endpoint.
  const metrics = await processMetricsOf(settings.metrics)
  // The log store's writer thread comes online (50-90 ms) while this thread builds the embedded API and listens.
  const opening = openSqliteLogStore(settings.logStorePath, metrics?.logBytes())
  opening.catch(() => {}) // awaited below: a failure that comes first is not an unhandled rejection
  let embedded: ReturnType<typeof createEmbeddedApi> | undefined
  const front = httpFront({
    routes: (req, res) => embedded?.handle(req, res) === true,
    serves: serving ? [`the Kubernetes API under ${embeddedPrefix}`] : [],
    tls,
  })
  let metricsServer: Awaited<ReturnType<typeof serveMetrics>> | undefined
  let secretStore: SecretStore | undefined
  let operator: Operator | undefined
  let apiServer: Awaited<ReturnType<typeof startApiServer>> | undefined
  let closing: Promise<void> | undefined
  const close = (now: boolean): Promise<void> => {
    if (closing !== undefined) {
      if (now) void operator?.stop(0) // a second signal: no more grace
      return closing
    }
    front.drain()
    closing = (async () => {
      // The operator writes its runs' final status through the embedded API, so it stops first.
      await operator?.stop(now ? 0 : settings.shutdownGraceMs)
      await apiServer?.stop()
      await metricsServer?.close()
      await front.close()
      embedded?.close()
      await secretStore?.close()
      await (await opening.catch(() => undefined))?.close()
    })()
    return closing
  }
  try {
    if (access !== undefined) {
      embedded = createEmbeddedApi({
        db: settings.storagePath,
        crds: loadCrds(crdsDir),
        prefix: embeddedPrefix,
        authenticate: access,
        authorAnnotation: changedByAnnotation,
        // Its Pods (the kubernetes driver's tasks) run on the daemon the docker driver uses.
        ...(settings.host.dockerHost === undefined ? {} : { dockerHost: settings.host.dockerHost }),
      })
    }
    const address = await listen(front.http, settings.http.port, settings.http.host)
    if (metrics !== undefined && settings.metrics !== undefined)
      metricsServer = await serveMetrics(metrics, settings.metrics)
    const kubeConfig = loadKubeConfig(settings.kube, {
      server: `${front.scheme}://${urlHost(loopbackHost(address.address))}:${address.port}${embeddedPrefix}`,
      token: processToken,
    })
    if (embedded !== undefined) inProcessTransport(kubeConfig, processToken, embedded.handle)
    const store = await opening
    secretStore = await openConfiguredSecretStore(settings, kubeConfig)
    operator = await startConfiguredOperator(settings, kubeConfig, store, secretStore, metrics?.operator())
    apiServer = await configuredApiServer(settings, kubeConfig, {
      policy,
      logs: store,
      secrets: secretStore,
      draining: () => front.phase === "draining",
      failures,
      ...(serving ? { authorAnnotation: changedByAnnotation } : {}),
      ...(metrics === undefined ? {} : { metrics: metrics.api() }),
    })
    front.ready(apiServer.callback)
    if (settings.api.auth.mode === "open") warnOpenAccess(settings.http.host)
    if (tls?.authority !== undefined) {
      process.stderr.write(
        `runnel: kubectl reaches ${embeddedPrefix} over TLS on the same port (https://${urlHost(settings.http.host)}:${address.port}${embeddedPrefix}), with a certificate from runnel's certificate authority ${tls.authority.file} (SHA-256 ${tls.authority.fingerprint}); \`runnel kubeconfig\` prints a kubeconfig that trusts it\n`,
      )
    }
    process.stdout.write(`runnel: listening on ${front.scheme}://${urlHost(settings.http.host)}:${address.port}\n`)
  } catch (error) {
    await close(true).catch(() => {})
    throw error
  }
  onShutdownSignal(close)
}
