import { extname } from "node:path"
import { badRequest } from "../core/errors.ts"
import { registry } from "../core/registry.ts"
import { type Feature, parseFeatures } from "./features.ts"
import {
  type CommandLine,
  deepFreeze,
  type FlagSpec,
  type FlagValues,
  type HostEnvironment,
  hostEnvironment,
  parseDurationFlag,
  parseKeyValues,
  parsePositiveInt,
  readFlags,
} from "./flags.ts"
import { type KubeRole, type KubeSource, kubeSource } from "./kubeconfig.ts"

/** The image YAML pipelines run their small tasks and mock `mirror_self` images in (runner and operator). */
export const mockImageFlag: FlagSpec = {
  name: "mock-image",
  value: "IMAGE",
  defaultValue: "busybox",
  description:
    "YAML pipelines: the image with a POSIX shell that stands for a mock resource's mirror_self image and runs runnel's small file tasks",
}

/** The flags of the operator role, shared by `runnel operator` and `runnel server`. */
export const operatorFlags: readonly FlagSpec[] = [
  {
    name: "kubeconfig",
    value: "FILE",
    description:
      "kubeconfig of the Kubernetes API to reconcile against; without it `runnel operator` takes $KUBECONFIG or ~/.kube/config, else its Pod's cluster, and `runnel server` its Pod's cluster, else its embedded API",
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
    name: "schedules-mode",
    value: "MODE",
    defaultValue: "timer",
    description:
      "how cron schedules fire: timer (the operator's own timer) or cronjob (a batch/v1 CronJob per schedule, for a cluster; intervals and seconds fields keep the timer)",
  },
  {
    name: "schedules-image",
    value: "IMAGE",
    defaultValue: "runnel",
    description: "cronjob mode: runnel's image, which the CronJobs' Jobs run as `runnel schedule fire`",
  },
  {
    name: "schedules-service-account",
    value: "NAME",
    defaultValue: "runnel-schedule-fire",
    description: "cronjob mode: the ServiceAccount of those Jobs, which may only create Runs and read Schedules",
  },
  {
    name: "allowed-features",
    value: "LIST",
    defaultValue: "*",
    description:
      "enabled features, comma-separated: webhooks, secrets, notifications, fetch, schedules, gates; * is the first four",
  },
]

/** What the operator and the API server both read: where the resources are, the drivers, the stores, the features. */
export type RoleSettings = {
  readonly kube: KubeSource
  readonly namespace: string
  /** `--storage-sqlite-path`: the embedded API's resources. */
  readonly storagePath: string
  /** Where run output is stored, beside `storagePath` (see logStorePath()). */
  readonly logStorePath: string
  readonly driver: string
  readonly allowedDrivers: readonly string[] | "*"
  readonly secretStore: { readonly path: string; readonly passphrase: string | undefined }
  readonly features: readonly Feature[]
  /** The environment the drivers read: the Docker host, the PATH of native tasks. */
  readonly host: HostEnvironment
}

/** The operator's settings, checked; each part gets its slice. */
export type OperatorSettings = RoleSettings & {
  readonly maxInFlight: number
  readonly limits: { readonly memoryMb: number; readonly timeoutMs: number }
  readonly shutdownGraceMs: number
  readonly secrets: Readonly<Record<string, string>>
  readonly mockImage: string
  /** How cron schedules fire, and what their CronJobs run in cronjob mode. */
  readonly schedules: { readonly mode: "timer" | "cronjob"; readonly image: string; readonly serviceAccount: string }
}

/** `runnel operator`'s settings from its command line and environment, checked and frozen. */
export function operatorSettings(
  cli: CommandLine,
  driverNames: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): OperatorSettings {
  return deepFreeze(operatorPart(readFlags(operatorFlags, cli, env), "operator", driverNames, hostEnvironment(env)))
}

/** The operator's part of `flags` (also `runnel server`'s): a bad value is a 400 naming its flag. */
export function operatorPart(
  flags: FlagValues,
  role: KubeRole,
  driverNames: readonly string[],
  host: HostEnvironment,
): OperatorSettings {
  return {
    ...rolePart(flags, role, driverNames, host),
    maxInFlight: parsePositiveInt(flags["max-in-flight"] as string, "max-in-flight"),
    limits: {
      memoryMb: parsePositiveInt(flags["pipeline-memory-mb"] as string, "pipeline-memory-mb"),
      timeoutMs: parseDurationFlag(flags["pipeline-timeout"] as string, "pipeline-timeout"),
    },
    shutdownGraceMs: parseDurationFlag(flags["shutdown-grace"] as string, "shutdown-grace"),
    secrets: parseKeyValues((flags.secret as string[] | undefined) ?? [], "secret"),
    mockImage: String(flags["mock-image"]),
    schedules: {
      mode: schedulesMode(String(flags["schedules-mode"])),
      image: String(flags["schedules-image"]),
      serviceAccount: String(flags["schedules-service-account"]),
    },
  }
}

/** The flags both roles share, checked: the driver names, the namespace, the stores, the features, the API. */
export function rolePart(
  flags: FlagValues,
  role: KubeRole,
  driverNames: readonly string[],
  host: HostEnvironment,
): RoleSettings {
  const driver = String(flags.driver)
  checkDriverName(driver, driverNames) // an unknown --driver fails at start, with the known ones
  const allowed = String(flags["allowed-drivers"])
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "")
  const allowedDrivers: readonly string[] | "*" = allowed.includes("*") ? "*" : allowed
  if (allowedDrivers !== "*") {
    for (const name of allowedDrivers) checkDriverName(name, driverNames)
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
  const storagePath = String(flags["storage-sqlite-path"])
  const settings = {
    namespace,
    storagePath,
    logStorePath: logStorePath(storagePath),
    driver,
    allowedDrivers,
    secretStore: {
      path: String(flags["secrets-sqlite-path"]),
      passphrase:
        flags["secrets-sqlite-passphrase"] === undefined ? undefined : String(flags["secrets-sqlite-passphrase"]),
    },
    features: parseFeatures(String(flags["allowed-features"])),
    host,
  }
  const kube = kubeSource(role, flags.kubeconfig === undefined ? undefined : String(flags.kubeconfig), host)
  return { kube, ...settings }
}

function schedulesMode(text: string): "timer" | "cronjob" {
  if (text === "timer" || text === "cronjob") return text
  throw badRequest(`--schedules-mode "${text}" is not a mode; use timer or cronjob`)
}

/** Fails with the known ones for a driver name runnel does not have. */
export function checkDriverName(name: string, driverNames: readonly string[]): void {
  registry(
    "driver",
    driverNames.map((known) => ({ name: known })),
  ).get(name)
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
