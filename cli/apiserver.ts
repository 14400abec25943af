import { createServer } from "node:http"
import { KubeConfig } from "@kubernetes/client-node"
import type { Command } from "commander"
import { type FlagSpec, hostEnvironment, parsePositiveInt, readFlags } from "../lib/config/flags.ts"
import { badRequest } from "../lib/core/errors.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import type { SecretStore } from "../lib/secrets/secret-store.ts"
import { openSqliteSecretStore } from "../lib/secrets/sqlite-secret-store.ts"
import { addFlags } from "./flags.ts"
import { logStorePath, onShutdownSignal, operatorFlags, operatorSettings } from "./operator.ts"
import {
  answerClientErrors,
  closeHttp,
  configuredApiServer,
  health,
  listen,
  loadKubeconfig,
  send,
  serverFlags,
  urlHost,
  warnOpenAccess,
  webhookSettings,
} from "./server.ts"

/** The API flags of `runnel server`, without the operator's own (in-flight limit, sandbox limits, secrets). */
const apiserverFlagNames = [
  "port",
  "host",
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
  "secrets-sqlite-path",
  "secrets-sqlite-passphrase",
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
        ? { ...flag, description: "kubeconfig of the Kubernetes API to serve; in a Pod, the in-cluster account" }
        : flag,
  )

export function apiserverCommand(program: Command): void {
  const command = program
    .command("apiserver")
    .description(
      "serve the REST API under /api and /health alone, against a Kubernetes API with runnel's CRDs (--kubeconfig, or the cluster of its Pod)",
    )
  addFlags(command, apiserverFlags)
  command.action(async (options: Record<string, unknown>) => {
    await apiserver(options)
  })
}

async function apiserver(options: Record<string, unknown>): Promise<void> {
  const flags = readFlags(apiserverFlags, options)
  // The operator's checks of the shared flags (driver, allowed drivers, namespace), its own at their defaults.
  const settings = operatorSettings({ ...readFlags(operatorFlags, {}, {}), ...flags })
  const port = flags.port === "0" ? 0 : parsePositiveInt(flags.port as string, "port")
  const host = String(flags.host)
  const maxQueueSize = parsePositiveInt(flags["max-queue-size"] as string, "max-queue-size")
  const maxBodyBytes = parsePositiveInt(flags["max-body-mb"] as string, "max-body-mb") * 1024 * 1024

  const kubeConfig = new KubeConfig()
  if (settings.kubeconfig !== undefined) loadKubeconfig(kubeConfig, settings.kubeconfig)
  else if (hostEnvironment().inCluster) kubeConfig.loadFromCluster()
  else {
    throw badRequest(
      "runnel apiserver needs a Kubernetes API: pass --kubeconfig FILE (outside a cluster), or run it in a Pod; `runnel server` serves one of its own",
    )
  }

  let draining = false
  const store: LogStore = await openSqliteLogStore(logStorePath(settings.storagePath))
  let secretStore: SecretStore | undefined
  let api: Awaited<ReturnType<typeof configuredApiServer>>
  try {
    // The operator stores the server's --secret values; the API server only opens the store.
    secretStore = await openSqliteSecretStore(settings.secretStore)
    api = await configuredApiServer({
      kubeConfig,
      namespace: settings.namespace,
      logs: store,
      secrets: secretStore,
      defaultDriver: settings.driver,
      allowedDrivers: settings.allowedDrivers,
      maxQueueSize,
      features: settings.features,
      maxBodyBytes,
      ...webhookSettings(flags),
      draining: () => draining,
    })
  } catch (error) {
    await secretStore?.close()
    await store.close()
    throw error
  }
  const http = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0] ?? "/"
    if (/^\/api(\/|$)/.test(path)) {
      api.callback(req, res)
    } else if (!health(req, res, draining)) {
      send(res, 404, {
        error: `no route for ${req.method} ${path}; this server answers /health and the REST API under /api`,
      })
    }
  })
  answerClientErrors(http)
  let address: Awaited<ReturnType<typeof listen>>
  try {
    address = await listen(http, port, host)
  } catch (error) {
    await api.stop()
    await secretStore.close()
    await store.close()
    throw error
  }
  warnOpenAccess(host)
  process.stdout.write(
    `runnel: listening on http://${urlHost(host)}:${address.port} (Kubernetes API ${kubeConfig.getCurrentCluster()?.server}, namespace "${settings.namespace}")\n`,
  )
  onShutdownSignal(async () => {
    draining = true
    await api.stop()
    await closeHttp(http)
    await secretStore.close()
    await store.close()
  })
}
