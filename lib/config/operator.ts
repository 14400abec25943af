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
  parseSwitch,
  parseWholeNumber,
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

/** Whether a task may ask for a privileged container (runner and operator). */
export const allowPrivilegedTasksFlag: FlagSpec = {
  name: "allow-privileged-tasks",
  description:
    "let tasks ask for privileged: true (runtime.run, YAML task steps): root on the Docker host or Kubernetes node; refused by default",
}

/** What a script's fetch(), notifications and native git may reach (runner and operator). */
export const networkFlags: readonly FlagSpec[] = [
  {
    name: "slack-api-url",
    value: "URL",
    defaultValue: "https://slack.com/api",
    description:
      "base URL of the Slack Web API that slack notifications post to (chat.postMessage), for Slack-compatible servers",
  },
  {
    name: "fetch-max-response-mb",
    value: "MB",
    defaultValue: "10",
    description: "largest response body a pipeline's fetch() reads; a larger one rejects",
  },
  {
    name: "allow-metadata-addresses",
    description:
      "let pipelines' fetch(), notifications and native git reach cloud metadata addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254, 100.100.100.200), refused by default",
  },
]

/** The settings of networkFlags, with the `fetch` and `notifications` features. */
export type NetworkSettings = {
  readonly fetch: boolean
  readonly notifications: boolean
  readonly slackApiUrl: string
  readonly fetchMaxResponseBytes: number
  readonly allowMetadataAddresses: boolean
}

export function networkPart(flags: FlagValues, features: readonly Feature[]): NetworkSettings {
  const slackApiUrl = String(flags["slack-api-url"])
  if (!URL.canParse(slackApiUrl) || !/^https?:$/.test(new URL(slackApiUrl).protocol)) {
    throw badRequest(`--slack-api-url "${slackApiUrl}" is not an http or https URL`)
  }
  return {
    fetch: features.includes("fetch"),
    notifications: features.includes("notifications"),
    slackApiUrl,
    fetchMaxResponseBytes:
      parsePositiveInt(flags["fetch-max-response-mb"] as string, "fetch-max-response-mb") * 1024 * 1024,
    allowMetadataAddresses: parseSwitch(
      flags["allow-metadata-addresses"] as string | undefined,
      "allow-metadata-addresses",
    ),
  }
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
    description: "driver of pipelines that name none: docker, native or kubernetes (Pods)",
  },
  {
    name: "allowed-drivers",
    value: "LIST",
    defaultValue: "*",
    description: "drivers pipelines may use, comma-separated, or * for all",
  },
  { name: "max-in-flight", value: "N", defaultValue: "10", description: "runs executing at once; the rest queue" },
  {
    name: "keep-runs",
    value: "N",
    defaultValue: "1000",
    description:
      "finished runs kept per pipeline, the newest; older ones and their output are deleted when a run finishes (0 keeps all)",
  },
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
  {
    name: "secrets-backend",
    value: "NAME",
    description:
      "where secrets are kept: sqlite, s3 or kubernetes (core Secrets in the namespace); s3 when --secrets-s3-bucket is set, else sqlite",
  },
  {
    name: "secrets-kubernetes-global-secret",
    value: "NAME",
    defaultValue: "runnel-secrets",
    description: "with --secrets-backend kubernetes: the core Secret whose keys are the global secrets",
  },
  {
    name: "secrets-s3-bucket",
    alias: "secrets-objstore-bucket",
    value: "NAME",
    description: "S3 bucket of the secrets; setting it selects the S3 backend over SQLite",
  },
  {
    name: "secrets-s3-endpoint",
    alias: "secrets-objstore-endpoint",
    value: "URL",
    description: "any S3-compatible server (path-style addressing); AWS S3 without it",
  },
  { name: "secrets-s3-region", alias: "secrets-objstore-region", value: "REGION", description: "region of the bucket" },
  {
    name: "secrets-s3-access-key-id",
    alias: "secrets-objstore-access-key-id",
    value: "ID",
    description:
      "access key id; without it and the secret key, the SDK's chain (environment, profile, IRSA, instance role)",
  },
  {
    name: "secrets-s3-secret-access-key",
    alias: "secrets-objstore-secret-access-key",
    value: "KEY",
    description: "secret access key, with --secrets-s3-access-key-id",
  },
  {
    name: "secrets-s3-passphrase",
    alias: "secrets-objstore-passphrase",
    value: "TEXT",
    description: "encrypts each value with AES-256-GCM before it is stored, the key its SHA-256 (recommended)",
  },
  {
    name: "secrets-s3-encrypt",
    alias: "secrets-objstore-encrypt",
    value: "MODE",
    description: "provider-side encryption of every object: sse-s3, sse-kms or sse-c",
  },
  {
    name: "secrets-s3-kms-key-id",
    alias: "secrets-objstore-kms-key-id",
    value: "ID",
    description: "with --secrets-s3-encrypt sse-kms: the KMS key (the bucket's default without it)",
  },
  {
    name: "secrets-s3-sse-c-key",
    alias: "secrets-objstore-sse-c-key",
    value: "BASE64",
    description: "with --secrets-s3-encrypt sse-c: the 32-byte key, base64, sent on every put and get",
  },
  {
    name: "secrets-s3-prefix",
    alias: "secrets-objstore-prefix",
    value: "PREFIX",
    description: "every object key starts with it: <prefix>/<scope>/<key>",
  },
  mockImageFlag,
  ...networkFlags,
  allowPrivilegedTasksFlag,
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
    name: "task-volume-storage-class",
    value: "NAME",
    description:
      "kubernetes driver: the StorageClass of a run's volumes and YAML caches (PersistentVolumeClaims); the cluster's default without it",
  },
  {
    name: "task-volume-size",
    value: "QUANTITY",
    defaultValue: "1Gi",
    description: "kubernetes driver: the size each of those claims requests, a Kubernetes quantity",
  },
  {
    name: "task-volume-access-mode",
    value: "MODE",
    defaultValue: "ReadWriteOnce",
    description:
      "kubernetes driver: ReadWriteOnce (a run's Pods all on the node of its first) or ReadWriteMany (Pods anywhere; the StorageClass must offer it)",
  },
  {
    name: "allowed-features",
    value: "LIST",
    defaultValue: "*",
    description:
      "enabled features, comma-separated: webhooks, secrets, notifications, fetch, schedules, gates; * is the first four",
  },
]

/** `--metrics-port` of every serving role (docs/operations.md, "What to watch"). */
export const metricsPortFlag: FlagSpec = {
  name: "metrics-port",
  value: "PORT",
  description:
    "serve Prometheus metrics at GET /metrics on a port of their own (0 takes a free one), on the address of --host and without authentication, so keep the port where only the scraper reaches it; off without it",
}

/** `runnel operator` serves nothing but its metrics: its flags, and where --metrics-port listens. */
export const operatorCommandFlags: readonly FlagSpec[] = [
  ...operatorFlags,
  metricsPortFlag,
  { name: "host", value: "HOST", defaultValue: "127.0.0.1", description: "address --metrics-port serves on" },
]

/** Where a role serves /metrics. */
export type MetricsSettings = { readonly port: number; readonly host: string }

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
  /** `--secrets-backend`, or s3 when the bucket is set (interface.md: it takes precedence over SQLite). */
  readonly secretsBackend: SecretsBackend
  /** `--secrets-s3-*`, when its bucket is set. */
  readonly s3Secrets: S3SecretsSettings | undefined
  /** `--secrets-kubernetes-global-secret`. */
  readonly kubernetesGlobalSecret: string
  readonly features: readonly Feature[]
  /** The environment the drivers read: the Docker host, the PATH of native tasks. */
  readonly host: HostEnvironment
  /** `--metrics-port` and `--host`: absent, the process serves no metrics and records none. */
  readonly metrics?: MetricsSettings
}

/** The operator's settings, checked; each part gets its slice. */
export type OperatorSettings = RoleSettings & {
  readonly maxInFlight: number
  /** `--keep-runs`: finished Runs kept per Pipeline; 0 keeps all. */
  readonly keepRuns: number
  readonly limits: { readonly memoryMb: number; readonly timeoutMs: number }
  readonly shutdownGraceMs: number
  readonly secrets: Readonly<Record<string, string>>
  readonly mockImage: string
  /** fetch(), notifications and native git: the features and their flags. */
  readonly network: NetworkSettings
  /** How cron schedules fire, and what their CronJobs run in cronjob mode. */
  readonly schedules: { readonly mode: "timer" | "cronjob"; readonly image: string; readonly serviceAccount: string }
  /** The kubernetes driver's PersistentVolumeClaims: a run's volumes and YAML caches. */
  readonly taskVolumes: TaskVolumeSettings
  /** `--allow-privileged-tasks`: without it a task asking for `privileged` ends in error. */
  readonly allowPrivilegedTasks: boolean
}

export type TaskVolumeSettings = {
  readonly storageClass: string | undefined
  readonly size: string
  readonly accessMode: "ReadWriteOnce" | "ReadWriteMany"
}

/** `runnel operator`'s settings from its command line and environment, checked and frozen. */
export function operatorSettings(
  cli: CommandLine,
  driverNames: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): OperatorSettings {
  return deepFreeze(
    operatorPart(readFlags(operatorCommandFlags, cli, env), "operator", driverNames, hostEnvironment(env)),
  )
}

/** The operator's part of `flags` (also `runnel server`'s): a bad value is a 400 naming its flag. */
export function operatorPart(
  flags: FlagValues,
  role: KubeRole,
  driverNames: readonly string[],
  host: HostEnvironment,
  authenticated = false,
): OperatorSettings {
  const roleSettings = rolePart(flags, role, driverNames, host, authenticated)
  return {
    ...roleSettings,
    network: networkPart(flags, roleSettings.features),
    maxInFlight: parsePositiveInt(flags["max-in-flight"] as string, "max-in-flight"),
    keepRuns: parseWholeNumber(flags["keep-runs"] as string, "keep-runs"),
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
    taskVolumes: taskVolumesPart(flags),
    allowPrivilegedTasks: parseSwitch(flags["allow-privileged-tasks"] as string | undefined, "allow-privileged-tasks"),
  }
}

function taskVolumesPart(flags: FlagValues): TaskVolumeSettings {
  const size = String(flags["task-volume-size"])
  // A Kubernetes quantity as storage requests are written: digits, an optional fraction and suffix.
  if (!/^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$/.test(size)) {
    throw badRequest(`--task-volume-size "${size}" is not a Kubernetes quantity such as 1Gi or 500Mi`)
  }
  const accessMode = String(flags["task-volume-access-mode"])
  if (accessMode !== "ReadWriteOnce" && accessMode !== "ReadWriteMany") {
    throw badRequest(`--task-volume-access-mode "${accessMode}" is not a mode; use ReadWriteOnce or ReadWriteMany`)
  }
  const storageClass = flags["task-volume-storage-class"]
  return { storageClass: storageClass ? String(storageClass) : undefined, size, accessMode }
}

/**
 * The flags both roles share, checked: the driver names, the namespace, the stores, the features, the API.
 * With authentication on (`authenticated`), `--allowed-drivers *` leaves out `native`: it runs a
 * task as the server's own user on its host, a way around every access rule (contract.md section 3).
 */
export function rolePart(
  flags: FlagValues,
  role: KubeRole,
  driverNames: readonly string[],
  host: HostEnvironment,
  authenticated = false,
): RoleSettings {
  const driver = String(flags.driver)
  checkDriverName(driver, driverNames) // an unknown --driver fails at start, with the known ones
  const allowed = allowedDriverNames(flags)
  const allowedDrivers: readonly string[] | "*" = !allowed.includes("*")
    ? allowed
    : authenticated
      ? [...new Set([...driverNames.filter((name) => name !== "native"), ...allowed.filter((name) => name !== "*")])]
      : "*"
  if (allowedDrivers !== "*") {
    for (const name of allowedDrivers) checkDriverName(name, driverNames)
    if (!allowedDrivers.includes(driver)) {
      const why =
        driver === "native" && allowed.includes("*")
          ? "; with authentication on, * leaves out native (it runs tasks as this server's user): name it, --allowed-drivers *,native, to allow it"
          : "; allow it, or choose one of those"
      throw badRequest(`--driver ${driver} is not among --allowed-drivers ${allowedDrivers.join(",")}${why}`)
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
    ...secretsBackendPart(flags),
    features: parseFeatures(String(flags["allowed-features"])),
    host,
  }
  const kube = kubeSource(role, flags.kubeconfig === undefined ? undefined : String(flags.kubeconfig), host)
  const metrics = metricsPart(flags)
  return { kube, ...settings, ...(metrics === undefined ? {} : { metrics }) }
}

/** --metrics-port on --host, when given; it cannot be the --port the API serves on. */
function metricsPart(flags: FlagValues): MetricsSettings | undefined {
  const given = flags["metrics-port"]
  if (given === undefined || given === "") return undefined
  const port = given === "0" ? 0 : parsePositiveInt(String(given), "metrics-port")
  if (port !== 0 && flags.port === String(port)) {
    throw badRequest(`--metrics-port ${port} is the --port the API serves on; choose another port for the metrics`)
  }
  return { port, host: String(flags.host) }
}

/** `--allowed-drivers` as given: names, or `*`. */
export const allowedDriverNames = (flags: FlagValues): string[] =>
  String(flags["allowed-drivers"])
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "")

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
function logStorePath(storagePath: string): string {
  if (storagePath === ":memory:") return ":memory:"
  const extension = extname(storagePath)
  return `${storagePath.slice(0, storagePath.length - extension.length)}-logs${extension}`
}

export type SecretsBackend = "sqlite" | "s3" | "kubernetes"
const secretsBackends: readonly SecretsBackend[] = ["sqlite", "s3", "kubernetes"]

function secretsBackendPart(
  flags: FlagValues,
): Pick<RoleSettings, "secretsBackend" | "s3Secrets" | "kubernetesGlobalSecret"> {
  const s3Secrets = s3SecretsPart(flags)
  const chosen = flags["secrets-backend"] === undefined ? "" : String(flags["secrets-backend"])
  if (chosen !== "" && !secretsBackends.includes(chosen as SecretsBackend)) {
    throw badRequest(`--secrets-backend "${chosen}" is not known: use ${secretsBackends.join(", ")}`)
  }
  const secretsBackend: SecretsBackend =
    chosen === "" ? (s3Secrets === undefined ? "sqlite" : "s3") : (chosen as SecretsBackend)
  if (secretsBackend === "s3" && s3Secrets === undefined) {
    throw badRequest("--secrets-backend s3 needs --secrets-s3-bucket")
  }
  const kubernetesGlobalSecret = String(flags["secrets-kubernetes-global-secret"])
  if (!/^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$/.test(kubernetesGlobalSecret) || kubernetesGlobalSecret.length > 253) {
    throw badRequest(`--secrets-kubernetes-global-secret "${kubernetesGlobalSecret}" is not a Secret name`)
  }
  return { secretsBackend, s3Secrets, kubernetesGlobalSecret }
}

export type S3SecretsSettings = {
  readonly bucket: string
  readonly endpoint: string | undefined
  readonly region: string | undefined
  readonly credentials: { readonly accessKeyId: string; readonly secretAccessKey: string } | undefined
  readonly passphrase: string | undefined
  readonly encryption:
    | { readonly mode: "sse-s3" }
    | { readonly mode: "sse-kms"; readonly kmsKeyId?: string }
    /** The key in base64, checked to be 32 bytes (settings are frozen, and a Buffer cannot be). */
    | { readonly mode: "sse-c"; readonly customerKey: string }
    | undefined
  readonly prefix: string | undefined
}

const encryptModes = ["sse-s3", "sse-kms", "sse-c"]

/** The `--secrets-s3-*` flags, checked; undefined without a bucket. */
function s3SecretsPart(flags: FlagValues): S3SecretsSettings | undefined {
  const flag = (name: string) => (flags[name] === undefined ? undefined : String(flags[name]))
  const bucket = flag("secrets-s3-bucket")
  if (bucket === undefined || bucket === "") return undefined
  const accessKeyId = flag("secrets-s3-access-key-id")
  const secretAccessKey = flag("secrets-s3-secret-access-key")
  if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
    throw badRequest(
      "give --secrets-s3-access-key-id and --secrets-s3-secret-access-key together, or neither for the SDK's default credentials",
    )
  }
  const endpoint = flag("secrets-s3-endpoint")
  if (endpoint !== undefined && !URL.canParse(endpoint)) {
    throw badRequest(`--secrets-s3-endpoint "${endpoint}" is not a URL`)
  }
  return {
    bucket,
    endpoint,
    region: flag("secrets-s3-region"),
    credentials:
      accessKeyId === undefined || secretAccessKey === undefined ? undefined : { accessKeyId, secretAccessKey },
    passphrase: flag("secrets-s3-passphrase"),
    encryption: s3Encryption(flag("secrets-s3-encrypt"), flag("secrets-s3-kms-key-id"), flag("secrets-s3-sse-c-key")),
    prefix: flag("secrets-s3-prefix"),
  }
}

function s3Encryption(
  mode: string | undefined,
  kmsKeyId: string | undefined,
  sseCKey: string | undefined,
): S3SecretsSettings["encryption"] {
  if (mode === undefined || mode === "") {
    if (kmsKeyId !== undefined || sseCKey !== undefined) {
      throw badRequest("--secrets-s3-kms-key-id and --secrets-s3-sse-c-key need --secrets-s3-encrypt sse-kms or sse-c")
    }
    return undefined
  }
  // contract.md: the neutral `sse-provider` is `sse-s3`.
  const chosen = mode === "sse-provider" ? "sse-s3" : mode
  if (!encryptModes.includes(chosen)) {
    throw badRequest(`--secrets-s3-encrypt "${mode}" is not known: use ${encryptModes.join(", ")}`)
  }
  if (chosen !== "sse-kms" && kmsKeyId !== undefined) {
    throw badRequest("--secrets-s3-kms-key-id is for --secrets-s3-encrypt sse-kms")
  }
  if (chosen !== "sse-c" && sseCKey !== undefined)
    throw badRequest("--secrets-s3-sse-c-key is for --secrets-s3-encrypt sse-c")
  if (chosen === "sse-s3") return { mode: "sse-s3" }
  if (chosen === "sse-kms") return kmsKeyId === undefined ? { mode: "sse-kms" } : { mode: "sse-kms", kmsKeyId }
  if (sseCKey === undefined) {
    throw badRequest("--secrets-s3-encrypt sse-c needs its key: --secrets-s3-sse-c-key, 32 bytes in base64")
  }
  const customerKey = Buffer.from(sseCKey, "base64")
  if (customerKey.length !== 32 || customerKey.toString("base64") !== sseCKey) {
    throw badRequest(
      `--secrets-s3-sse-c-key must be 32 bytes in base64 (44 characters), not ${sseCKey.length} characters; make one with: openssl rand -base64 32`,
    )
  }
  return { mode: "sse-c", customerKey: sseCKey }
}
