import { extname } from "node:path"
import { KubeConfig } from "@kubernetes/client-node"
import type { Command } from "commander"
import { type Feature, parseFeatures } from "../lib/config/features.ts"
import {
  type FlagSpec,
  type FlagValues,
  parseDurationFlag,
  parseKeyValues,
  parsePositiveInt,
  readFlags,
} from "../lib/config/flags.ts"
import { badRequest, errorMessage } from "../lib/core/errors.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { globalScope, runSecrets, type SecretStore } from "../lib/secrets/secret-store.ts"
import { openSqliteSecretStore } from "../lib/secrets/sqlite-secret-store.ts"
import { type Operator, startOperator } from "../operator/operator.ts"
import { driverRegistry } from "./drivers.ts"
import { addFlags, mockImageFlag } from "./flags.ts"
import { processLog } from "./log.ts"

/** The flags of the operator role, shared by `runnel operator` and `runnel server`. */
export const operatorFlags: readonly FlagSpec[] = [
  {
    name: "kubeconfig",
    value: "FILE",
    description:
      "kubeconfig of the Kubernetes API to reconcile against; `runnel server` without it serves its embedded API, or in a Pod uses the cluster",
  },
  { name: "namespace", value: "NAME", defaultValue: "default", description: "namespace of the Pipelines and Runs" },
  {
    name: "storage-sqlite-path",
    value: "PATH",
    defaultValue: "runnel.db",
    description:
      "SQLite file of the embedded API's resources; run output goes to a file beside it, runnel.db: runnel-logs.db (:memory: keeps both in memory)",
  },
  {
    name: "driver",
    value: "NAME",
    defaultValue: "docker",
    description: "driver of pipelines that name none: docker or native",
  },
  {
    name: "allowed-drivers",
    value: "LIST",
    defaultValue: "*",
    description: "drivers pipelines may use, comma-separated, or * for all",
  },
  { name: "max-in-flight", value: "N", defaultValue: "10", description: "runs executing at once; the rest queue" },
  { name: "pipeline-memory-mb", value: "MB", defaultValue: "128", description: "memory limit of a script's sandbox" },
  { name: "pipeline-timeout", value: "DURATION", defaultValue: "1h", description: "wall-clock limit of one run" },
  {
    name: "shutdown-grace",
    value: "DURATION",
    defaultValue: "30s",
    description: "on SIGTERM or SIGINT, how long running runs may finish before they are aborted",
  },
  {
    name: "secret",
    value: "KEY=VALUE",
    repeatable: true,
    description: "a global secret every run may use, stored in the secret store at start (repeatable)",
  },
  {
    name: "secrets-sqlite-path",
    alias: "secrets-sqldb-path",
    value: "PATH",
    defaultValue: "test.db",
    description:
      "SQLite file of the encrypted secrets; without a passphrase its key is kept in PATH.key (:memory: for ephemeral)",
  },
  {
    name: "secrets-sqlite-passphrase",
    alias: "secrets-sqldb-passphrase",
    value: "TEXT",
    description: "passphrase of the secret store; the AES-256 key is its SHA-256",
  },
  mockImageFlag,
  {
    name: "allowed-features",
    value: "LIST",
    defaultValue: "*",
    description:
      "enabled features, comma-separated: webhooks, secrets, notifications, fetch, schedules, gates; * is the first four",
  },
]

/** The operator's settings, checked; each part gets its slice. */
export type OperatorSettings = {
  readonly kubeconfig: string | undefined
  readonly namespace: string
  readonly storagePath: string
  readonly driver: string
  readonly allowedDrivers: readonly string[] | "*"
  readonly maxInFlight: number
  readonly limits: { readonly memoryMb: number; readonly timeoutMs: number }
  readonly shutdownGraceMs: number
  readonly secrets: Readonly<Record<string, string>>
  readonly secretStore: { readonly path: string; readonly passphrase: string | undefined }
  readonly features: readonly Feature[]
  readonly mockImage: string
}

export function operatorSettings(flags: FlagValues): OperatorSettings {
  const drivers = driverRegistry()
  const driver = String(flags.driver)
  drivers.get(driver) // an unknown --driver fails at start, with the known ones
  const allowed = String(flags["allowed-drivers"])
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "")
  const allowedDrivers = allowed.includes("*") ? "*" : allowed
  if (allowedDrivers !== "*") {
    for (const name of allowedDrivers) drivers.get(name)
    if (!allowedDrivers.includes(driver)) {
      throw badRequest(
        `--driver ${driver} is not among --allowed-drivers ${allowedDrivers.join(",")}; allow it, or choose one of those`,
      )
    }
  }
  const namespace = String(flags.namespace)
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(namespace) || namespace.length > 63) {
    throw badRequest(`--namespace "${namespace}" is not a Kubernetes namespace name (lowercase letters, digits, "-")`)
  }
  return {
    kubeconfig: flags.kubeconfig === undefined ? undefined : String(flags.kubeconfig),
    namespace,
    storagePath: String(flags["storage-sqlite-path"]),
    driver,
    allowedDrivers,
    maxInFlight: parsePositiveInt(flags["max-in-flight"] as string, "max-in-flight"),
    limits: {
      memoryMb: parsePositiveInt(flags["pipeline-memory-mb"] as string, "pipeline-memory-mb"),
      timeoutMs: parseDurationFlag(flags["pipeline-timeout"] as string, "pipeline-timeout"),
    },
    shutdownGraceMs: parseDurationFlag(flags["shutdown-grace"] as string, "shutdown-grace"),
    secrets: parseKeyValues((flags.secret as string[] | undefined) ?? [], "secret"),
    secretStore: {
      path: String(flags["secrets-sqlite-path"]),
      passphrase:
        flags["secrets-sqlite-passphrase"] === undefined ? undefined : String(flags["secrets-sqlite-passphrase"]),
    },
    features: parseFeatures(String(flags["allowed-features"])),
    mockImage: String(flags["mock-image"]),
  }
}

/**
 * Where run output is stored for a given --storage-sqlite-path: a file of its
 * own beside the resources, `-logs` before the extension (runnel.db:
 * runnel-logs.db), so that the log store's writer never holds the lock the
 * embedded API's writes wait for.
 */
export function logStorePath(storagePath: string): string {
  if (storagePath === ":memory:") return ":memory:"
  const extension = extname(storagePath)
  return `${storagePath.slice(0, storagePath.length - extension.length)}-logs${extension}`
}

/** The secret store of the flags, with the server's --secret values stored in its global scope. */
export async function openConfiguredSecretStore(settings: OperatorSettings): Promise<SecretStore> {
  const secrets = await openSqliteSecretStore(settings.secretStore)
  try {
    if (Object.keys(settings.secrets).length > 0) await secrets.set(globalScope, settings.secrets)
  } catch (error) {
    await secrets.close()
    throw error
  }
  return secrets
}

/** The composition of the operator role: the registry's drivers, the secret store, the flags' limits. */
export function startConfiguredOperator(
  settings: OperatorSettings,
  kubeConfig: KubeConfig,
  store: LogStore,
  secretStore: SecretStore,
): Promise<Operator> {
  const drivers = driverRegistry()
  return startOperator({
    kubeConfig,
    namespace: settings.namespace,
    store,
    secrets: runSecrets(secretStore, settings.features.includes("secrets")),
    webhooks: settings.features.includes("webhooks"),
    drivers: (name, config) => drivers.get(name).create(config),
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

export function operatorCommand(program: Command): void {
  const command = program
    .command("operator")
    .description(
      "run the operator alone against a Kubernetes API (with runnel's CRDs installed): it executes Runs and checks Pipelines",
    )
  addFlags(command, operatorFlags)
  command.action(async (options: Record<string, unknown>) => {
    const settings = operatorSettings(readFlags(operatorFlags, options))
    const kubeConfig = new KubeConfig()
    try {
      // Without --kubeconfig, client-node's own rules: $KUBECONFIG, ~/.kube/config, or the in-cluster account.
      if (settings.kubeconfig === undefined) kubeConfig.loadFromDefault()
      else kubeConfig.loadFromFile(settings.kubeconfig)
    } catch (error) {
      throw badRequest(`cannot load the kubeconfig "${settings.kubeconfig ?? "(default)"}": ${errorMessage(error)}`)
    }
    const store = await openSqliteLogStore(logStorePath(settings.storagePath))
    let secretStore: SecretStore | undefined
    let operator: Operator
    try {
      secretStore = await openConfiguredSecretStore(settings)
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
  })
}
