import { SystemError } from "../../lib/core/errors.ts"

/**
 * The driver contract: a driver runs the tasks of runs (containers, pods,
 * processes) and nothing else. Every driver passes the shared suite in
 * driver-contract.fixture.ts; the kubernetes driver will too.
 *
 * - `open(runId)` gives a `RunDriver` scoped to one run. Everything it creates
 *   (containers, volumes, processes, directories) carries or lives under the
 *   run id, and `close()` removes all of it; only caches (below) outlive it.
 * - `exec()` may be called concurrently; each call owns what it starts.
 *   It streams stdout and stderr to `output` as the bytes arrive, in order per
 *   stream, and resolves with the exit code once the task has ended and its
 *   output has been delivered. A non-zero exit code resolves; it does not reject.
 * - When the task runs longer than `timeoutMs`, exec() kills it and resolves
 *   with `timedOut: true`.
 * - When `signal` aborts, exec() kills what it started and rejects with the
 *   signal's reason.
 * - A task the driver cannot start (no such image, no such executable, the
 *   daemon is down) rejects with a `SystemError` whose message says what to do.
 * - `createVolume(name)` gives a volume shared by the tasks of the run that
 *   mount it; `close()` removes it.
 * - `createVolume(key, { cache: true })` gives a cache: a volume that outlives
 *   the run, for task caches kept between runs (Concourse `caches:`). `key` is
 *   chosen by the caller and stable across runs, such as
 *   `cache-<pipeline uid>-<job>-<task>-<n>`: 1 to 200 lowercase letters, digits,
 *   `-`, `.` and `_`, beginning with a letter or digit (see `assertCacheKey`);
 *   any other key rejects with a `SystemError`. Neither `close()` nor
 *   `removeLeftovers()` removes a cache, and a later run creating the same key
 *   finds what earlier runs left in it. Nothing in this contract removes a
 *   cache yet.
 * - Runs that use one cache at the same time share it: each sees the other's
 *   writes as they happen, and a task killed midway leaves what it wrote.
 *   Concourse instead gives each build a copy-on-write copy; runnel shares
 *   because Docker volumes and plain directories have no cheap copy-on-write
 *   snapshot, and copying a large cache on every run would spend much of what
 *   it saves. So a task treats a cache as a speedup whose contents may be
 *   partial or changing, never as an input it trusts; the caches of package
 *   managers (npm, Go, Cargo, pip) are built for that.
 * - Within one run a name is either a volume or a cache; asking for it as the
 *   other kind rejects with a `SystemError`.
 * - `close()` is idempotent and succeeds even if nothing started.
 */
export interface Driver {
  readonly name: string
  open(runId: string): Promise<RunDriver>
  /** Removes what crashed processes left behind (containers, volumes, directories of dead owners). */
  removeLeftovers(): Promise<void>
  /** Releases the driver's own resources (connections). */
  close(): Promise<void>
}

/** `driver`, whose `open(runId)` first waits for `before(runId)`. */
export function openingAfter(driver: Driver, before: (runId: string) => Promise<unknown>): Driver {
  return {
    name: driver.name,
    open: async (runId) => {
      await before(runId)
      return driver.open(runId)
    },
    removeLeftovers: () => driver.removeLeftovers(),
    close: () => driver.close(),
  }
}

export interface RunDriver {
  exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit>
  createVolume(name: string, options?: VolumeOptions): Promise<Volume>
  close(): Promise<void>
}

export type VolumeOptions = {
  /** Keep the volume between runs under the key `name`; see the contract above. */
  readonly cache?: boolean
}

const cacheKeyMaxLength = 200

/**
 * Rejects a cache key the contract does not allow. A key becomes part of a
 * Docker volume name and a directory name as it is, so it must not need
 * escaping: two keys that escaped to one name would share a cache, and `..`
 * would leave the caches directory.
 */
export function assertCacheKey(key: string): void {
  if (key.length > cacheKeyMaxLength) {
    throw new SystemError(
      `cache key ${JSON.stringify(`${key.slice(0, 40)}...`)} is ${key.length} characters long; a cache key has at most ${cacheKeyMaxLength}`,
    )
  }
  if (!/^[a-z0-9][a-z0-9._-]*$/.test(key)) {
    throw new SystemError(
      `cache key ${JSON.stringify(key)} is not allowed: use lowercase letters, digits, "-", "." and "_", beginning with a letter or digit`,
    )
  }
}

/** Rejects asking for `name` as a cache when the run made it a volume, or the other way round. */
export function assertVolumeKind(name: string, cache: boolean, existingCache: boolean | undefined): void {
  if (existingCache === undefined || existingCache === cache) return
  const [asked, made] = cache ? ["a cache", "a volume"] : ["a volume", "a cache"]
  throw new SystemError(`"${name}" was requested as ${asked}, but this run already made it ${made}; use another name`)
}

export type TaskSpec = {
  /** Task path inside the run, `tasks/<n>/<name>`; unique within the run. */
  readonly path: string
  readonly name: string
  /** Image reference; drivers that run no containers ignore it. */
  readonly image: string
  readonly command: { readonly path: string; readonly args: readonly string[] }
  /** Resolved values: secrets are already in place. */
  readonly env: Readonly<Record<string, string>>
  /** Container path to volume; only volumes created by the same RunDriver (anything else rejects). */
  readonly mounts: Readonly<Record<string, Volume>>
  /** Absolute; created when missing. Only what lies inside a mount is sure to outlive the task. */
  readonly workDir?: string
  /** Counted from the exec() call, so preparing the task (pulling its image) counts too. */
  readonly timeoutMs?: number
  /** What the task's container may use; a driver that cannot enforce a limit says so on the task's stderr. */
  readonly resources?: TaskResources
  /**
   * Run the container with every privilege of its host (Docker's and Kubernetes' `privileged`).
   * The operator refuses such a task before it reaches a driver unless the server allows it
   * (refusePrivileged); a driver that cannot run one rejects with a SystemError.
   */
  readonly privileged?: boolean
}

/** Limits of one task's container; each absent field is no limit. */
export type TaskResources = {
  /** At most this many CPUs, in thousandths (`runtime.run`'s `cpu`: "500m" is 500): a CFS quota. */
  readonly cpuMillis?: number
  /** A relative CPU weight, 1024 being one CPU's default (YAML `container_limits.cpu`, Concourse's shares): no cap. */
  readonly cpuShares?: number
  /** At most this many bytes of memory, swap included; past it the kernel kills the task (OOMKilled). */
  readonly memoryBytes?: number
}

/** The line a driver writes on a task's stderr when the kernel killed it for its memory limit. */
export function oomKilledNote(resources: TaskResources | undefined): Buffer {
  const limit = resources?.memoryBytes === undefined ? "" : ` of ${formatBytes(resources.memoryBytes)}`
  return Buffer.from(`runnel: the task used more memory than its limit${limit} and was killed (OOMKilled)\n`)
}

/** Bytes as a Kubernetes quantity: the largest binary unit that divides them exactly ("16Mi"), else plain bytes. */
export function formatBytes(bytes: number): string {
  for (const [unit, size] of [
    ["Ti", 1024 ** 4],
    ["Gi", 1024 ** 3],
    ["Mi", 1024 ** 2],
    ["Ki", 1024],
  ] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size}${unit}`
  }
  return String(bytes)
}

/** `name` is the name given to createVolume (a cache's key); the driver maps it to what it made. */
export type Volume = { readonly name: string }

/**
 * Where a task's output goes. Called synchronously with raw bytes as they
 * arrive; the callee copes with chunks that split lines or characters.
 */
export interface TaskOutput {
  stdout(chunk: Buffer): void
  stderr(chunk: Buffer): void
}

export type TaskExit = { readonly code: number; readonly timedOut: boolean }

/** Driver-specific settings of a pipeline (`driver_config`), free-form. */
export type DriverConfig = Readonly<Record<string, unknown>>

/** Makes a driver from a pipeline's `driver_config`; the registry in cli/ lists the factories. */
export interface DriverFactory {
  readonly name: string
  create(config: DriverConfig): Driver
}
