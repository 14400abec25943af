/**
 * The driver contract: a driver runs the tasks of runs (containers, pods,
 * processes) and nothing else. Every driver passes the shared suite in
 * driver-contract.ts; the kubernetes driver will too.
 *
 * - `open(runId)` gives a `RunDriver` scoped to one run. Everything it creates
 *   (containers, volumes, processes, directories) carries or lives under the
 *   run id, and `close()` removes all of it.
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
 *   mount it.
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

export interface RunDriver {
  exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit>
  createVolume(name: string): Promise<Volume>
  close(): Promise<void>
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
}

/** `name` is the name given to createVolume; the driver maps it to what it made, inside the run. */
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
