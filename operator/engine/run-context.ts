import { StringDecoder } from "node:string_decoder"
import { errorMessage, SystemError } from "../../lib/core/errors.ts"
import type { OutputStream, TaskRecord } from "../../lib/core/run.ts"
import type { FinalRunStatus, TaskStatus } from "../../lib/core/status.ts"
import { consoleTaskPath, scriptTaskPath } from "../../lib/core/task-path.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import type { Redactor } from "../../lib/logs/redactor.ts"
import { type TaskLog, taskLog } from "../../lib/logs/task-log.ts"
import type { SecretResolver } from "../../lib/secrets/secret-resolver.ts"
import type { Driver, RunDriver, Volume } from "../drivers/driver.ts"
import type { RunObserver } from "./run-observer.ts"
import type { TaskRequest } from "./task-request.ts"

/** What `runtime.run` resolves to; stdout and stderr are redacted and keep at most `keptOutputChars` each. */
export type TaskResult = {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
  readonly startedAt: string
  readonly endedAt: string
  readonly timedOut: boolean
}

/** How runTaskAt runs one task; YAML pipelines use these, scripts need none. */
export type TaskOptions = {
  /**
   * Aborts this task instead of the run's signal. The caller combines it with
   * the run's when it should stop with the run; a hook that must still run
   * after a stop (on_abort, ensure) passes one the stop does not abort.
   */
  readonly signal?: AbortSignal
  /**
   * Keep stdout out of the log store and the observer and return it whole and
   * unredacted: a resource's JSON answer, a file read from an artifact. stderr
   * is stored as usual.
   */
  readonly captureStdout?: boolean
  /** Resolve env values written `secret:KEY` (scripts); YAML resolves its ((variables)) itself and passes false. */
  readonly resolveSecrets?: boolean
  /**
   * Not a task of the run: no record, no numbering, output returned but
   * neither stored nor published (runnel reading a task file from an
   * artifact). `path` must still be unique within the run.
   */
  readonly internal?: boolean
}

/**
 * A mount whose volume name starts with this is a cache (Concourse `caches:`):
 * the rest of the name is the cache key, stable across runs, and the volume
 * outlives the run (`createVolume(key, { cache: true })` in the driver contract).
 */
export const cacheVolumePrefix = "cache:"

/** A task's result text keeps its last 4 Mi characters; the whole output is in the log store. */
export const keptOutputChars = 4 * 1024 * 1024

export type RunContextDeps = {
  readonly runId: string
  readonly driver: Driver
  readonly store: LogStore
  readonly redactor: Redactor
  readonly secrets: SecretResolver
  readonly observer: RunObserver
  /** Aborts every task of the run. */
  readonly signal: AbortSignal
  /** Ends the run at once with status `error` (a missing secret, the driver down). */
  readonly fail: (error: SystemError) => void
  /**
   * Results of tasks a previous attempt of this run finished, by path. A
   * resumed script replays from the start: these tasks return their recorded
   * result at once instead of running twice.
   */
  readonly journal?: ReadonlyMap<string, TaskResult>
}

/**
 * The one place a run's tasks are started, recorded and cleaned up, shared by
 * script and YAML pipelines: task numbering, secret resolution, the driver
 * (opened on the first task, so a run without tasks needs none), volumes,
 * output through the log sink, and the script's console task.
 */
export class RunContext {
  readonly #deps: RunContextDeps
  readonly #records = new Map<string, TaskRecord>()
  readonly #running = new Set<Promise<unknown>>()
  readonly #volumes = new Map<string, Promise<Volume>>()
  #runDriver: Promise<RunDriver> | undefined
  #taskCount = 0
  #console: TaskLog | undefined

  constructor(deps: RunContextDeps) {
    this.#deps = deps
  }

  /** Runs one task; rejects when the run is aborted or runnel cannot run it, never for a non-zero exit. */
  runTask(request: TaskRequest): Promise<TaskResult> {
    const path = scriptTaskPath(++this.#taskCount, request.name)
    const recorded = this.#deps.journal?.get(path)
    if (recorded !== undefined) {
      const record = this.#deps.store.tasks(this.#deps.runId).find((task) => task.path === path)
      if (record !== undefined) this.#records.set(path, record)
      return Promise.resolve(recorded)
    }
    const running = this.#run(path, request)
    this.#running.add(running)
    running.then(
      () => this.#running.delete(running),
      () => this.#running.delete(running),
    )
    return running
  }

  /**
   * An operation runnel does itself for the script (a native resource's check,
   * fetch or push): a task of the run at the next `tasks/<n>/<name>`, numbered
   * with runtime.run's tasks, recorded, shown and redacted like them; its
   * output is what `work` writes to its log. It succeeds when `work` resolves.
   * When `work` rejects, the task is a `failure` with the message on its
   * stderr and the rejection reaches the script, which may catch it; a
   * SystemError (a missing secret, the driver down) ends the run as `error`,
   * as runTask's do. Not journaled: a resumed run does the operation again.
   */
  async runOperation<T>(name: string, work: (log: TaskLog, path: string) => Promise<T>): Promise<T> {
    const path = scriptTaskPath(++this.#taskCount, name)
    const started: TaskRecord = {
      runId: this.#deps.runId,
      path,
      name,
      status: "running",
      code: null,
      startedAt: new Date().toISOString(),
      endedAt: null,
    }
    this.#save(started)
    this.#deps.observer.taskStarted(started)
    const log = this.#taskLog(path)
    const end = (status: TaskStatus, code: number | null) => {
      log.end()
      this.#finish({ ...started, status, code, endedAt: new Date().toISOString() })
    }
    const running = work(log, path)
    this.#running.add(running)
    try {
      const result = await running
      end("success", 0)
      return result
    } catch (error) {
      const aborted = this.#deps.signal.aborted
      if (!aborted) log.stderr(`${errorMessage(error)}\n`)
      end(aborted ? "aborted" : error instanceof SystemError ? "error" : "failure", aborted ? null : 1)
      if (aborted) throw this.#deps.signal.reason
      if (error instanceof SystemError) this.#deps.fail(error)
      throw error
    } finally {
      this.#running.delete(running)
    }
  }

  /** Replaces each `secret:KEY` string in `value`, walking maps and lists; other values stay as they are. */
  async resolveSecretsIn(value: unknown, where: string): Promise<unknown> {
    if (typeof value === "string") {
      if (!value.startsWith("secret:")) return value
      return this.#secret(value.slice("secret:".length), `${where} asks for it`)
    }
    if (Array.isArray(value))
      return Promise.all(value.map((item, index) => this.resolveSecretsIn(item, `${where}[${index}]`)))
    if (value !== null && typeof value === "object") {
      const resolved: Record<string, unknown> = {}
      for (const [key, item] of Object.entries(value))
        resolved[key] = await this.resolveSecretsIn(item, `${where}.${key}`)
      return resolved
    }
    return value
  }

  /**
   * Runs one task at a path the caller chose (YAML: `jobs/<job>/<n>/<kind>/<name>`),
   * recorded, redacted and cleaned up as runTask's are. Rejects when the task
   * is aborted or runnel cannot run it (the task is then `aborted` or `error`),
   * never for a non-zero exit.
   */
  runTaskAt(path: string, request: TaskRequest, options: TaskOptions = {}): Promise<TaskResult> {
    const running = this.#run(path, request, options)
    this.#running.add(running)
    running.then(
      () => this.#running.delete(running),
      () => this.#running.delete(running),
    )
    return running
  }

  /**
   * Records a task that never ran: `skipped` (a YAML job skipped as a whole) or
   * `error` (runnel could not even build it, e.g. an undefined variable), with
   * `message` as its stderr.
   */
  recordTask(path: string, name: string, status: "skipped" | "error", message?: string): void {
    const now = new Date().toISOString()
    const record: TaskRecord = { runId: this.#deps.runId, path, name, status, code: null, startedAt: now, endedAt: now }
    this.#save(record)
    this.#deps.observer.taskStarted(record)
    if (message !== undefined) {
      const log = this.#taskLog(path)
      log.stderr(`${message}\n`)
      log.end()
    }
    this.#finish(record)
  }

  #taskLog(path: string): TaskLog {
    const { runId, store, redactor, observer } = this.#deps
    return taskLog({
      runId,
      path,
      store,
      redactor,
      keepChars: keptOutputChars,
      onText: (stream, text) => observer.output(path, stream, text),
    })
  }

  async #run(path: string, request: TaskRequest, options: TaskOptions = {}): Promise<TaskResult> {
    const { runId, store, redactor, observer } = this.#deps
    const signal = options.signal ?? this.#deps.signal
    const internal = options.internal === true
    const save = (next: TaskRecord) => {
      if (!internal) this.#save(next)
    }
    const finish = (next: TaskRecord) => {
      if (!internal) this.#finish(next)
    }
    let record: TaskRecord = {
      runId,
      path,
      name: request.name,
      status: "pending",
      code: null,
      startedAt: null,
      endedAt: null,
    }
    save(record)
    try {
      const env = options.resolveSecrets === false ? { ...request.env } : await this.#resolveSecrets(request)
      const driver = await this.#driver()
      const mounts: Record<string, Volume> = {}
      for (const [mountPath, name] of Object.entries(request.mounts))
        mounts[mountPath] = await this.#volume(driver, name)
      signal.throwIfAborted()
      record = { ...record, status: "running", startedAt: new Date().toISOString() }
      save(record)
      if (!internal) observer.taskStarted(record)
      const log = internal
        ? capturedLog(true)
        : options.captureStdout === true
          ? withCapturedStdout(this.#taskLog(path))
          : taskLog({
              runId,
              path,
              store,
              redactor,
              keepChars: keptOutputChars,
              onText: (stream, text) => observer.output(path, stream, text),
            })
      let output = { stdout: "", stderr: "" }
      let exit: { code: number; timedOut: boolean }
      try {
        exit = await driver.exec({ ...request, path, env, mounts }, log, signal)
      } finally {
        output = log.end()
      }
      record = {
        ...record,
        status: exit.code === 0 && !exit.timedOut ? "success" : "failure",
        code: exit.code,
        endedAt: new Date().toISOString(),
      }
      finish(record)
      return {
        code: exit.code,
        ...output,
        startedAt: record.startedAt ?? "",
        endedAt: record.endedAt ?? "",
        timedOut: exit.timedOut,
      }
    } catch (error) {
      const status: TaskStatus = signal.aborted ? "aborted" : "error"
      finish({ ...record, status, endedAt: new Date().toISOString() })
      if (signal.aborted) throw signal.reason
      const failure =
        error instanceof SystemError ? error : new SystemError(`task ${path}: ${errorMessage(error)}`, { cause: error })
      this.#deps.fail(failure)
      throw failure
    }
  }

  async #resolveSecrets(request: TaskRequest): Promise<Record<string, string>> {
    const env: Record<string, string> = {}
    for (const [name, value] of Object.entries(request.env)) {
      if (!value.startsWith("secret:")) {
        env[name] = value
        continue
      }
      env[name] = await this.#secret(value.slice("secret:".length), `task "${request.name}" asks for it in env ${name}`)
    }
    return env
  }

  /** A secret's value; a missing one is a SystemError naming the key and who asked (`why`). */
  async #secret(key: string, why: string): Promise<string> {
    const secret = await this.#deps.secrets.get(key)
    if (secret === undefined) {
      throw new SystemError(
        `secret "${key}" is not set: ${why}; give the run a secret named ${key} (runnel runner: --secret ${key}=VALUE)`,
      )
    }
    return secret
  }

  #driver(): Promise<RunDriver> {
    this.#runDriver ??= this.#deps.driver.open(this.#deps.runId)
    return this.#runDriver
  }

  #volume(driver: RunDriver, name: string): Promise<Volume> {
    let volume = this.#volumes.get(name)
    if (volume === undefined) {
      volume = name.startsWith(cacheVolumePrefix)
        ? driver.createVolume(name.slice(cacheVolumePrefix.length), { cache: true })
        : driver.createVolume(name)
      this.#volumes.set(name, volume)
    }
    return volume
  }

  /** The script's own console output, stored as the task `pipeline/console`. */
  console(stream: OutputStream, text: string): void {
    if (this.#console === undefined) {
      const { runId, store, redactor, observer } = this.#deps
      const record: TaskRecord = {
        runId,
        path: consoleTaskPath,
        name: "console",
        status: "running",
        code: null,
        startedAt: new Date().toISOString(),
        endedAt: null,
      }
      this.#save(record)
      observer.taskStarted(record)
      this.#console = taskLog({
        runId,
        path: consoleTaskPath,
        store,
        redactor,
        keepChars: 0,
        onText: (output, chunk) => observer.output(consoleTaskPath, output, chunk),
      })
    }
    this.#console[stream](text)
  }

  /**
   * Waits for tasks still running (abort the signal first to kill them), ends
   * the console task with the run's status, removes the run's containers and
   * volumes, and returns the task records in start order.
   */
  async close(status: FinalRunStatus): Promise<TaskRecord[]> {
    await Promise.allSettled([...this.#running])
    const consoleRecord = this.#records.get(consoleTaskPath)
    if (this.#console !== undefined && consoleRecord !== undefined) {
      this.#console.end()
      this.#finish(closedTask(consoleRecord, status))
    }
    // A driver that cannot remove what the run left (its Docker daemon went away) must not undo how the run
    // ended: the operator executes a run that rejects again, tasks and all. What is left carries the run's
    // labels, and the driver removes it once its owner process is gone (the next `runnel server` start).
    if (this.#runDriver !== undefined) await (await this.#runDriver.catch(() => undefined))?.close().catch(() => {})
    return [...this.#records.values()]
  }

  #save(record: TaskRecord): void {
    this.#records.set(record.path, record)
    this.#deps.store.saveTask(record)
  }

  #finish(record: TaskRecord): void {
    this.#save(record)
    this.#deps.observer.taskFinished(record)
  }
}

/**
 * A task still open when its run ended: the console task ends with the run's
 * status (and 0 or 1 as its code: a task's code, not the run's exit code),
 * any other task is `aborted`.
 */
export function closedTask(
  task: TaskRecord,
  runStatus: FinalRunStatus,
  endedAt = new Date().toISOString(),
): TaskRecord {
  return task.path === consoleTaskPath
    ? { ...task, status: runStatus, code: runStatus === "success" ? 0 : 1, endedAt }
    : { ...task, status: "aborted", endedAt }
}

/** A TaskLog that only collects: stdout (and stderr when `both`) decoded whole, unredacted, stored nowhere. */
function capturedLog(both: boolean): TaskLog {
  const stdout = new StringDecoder("utf8")
  const stderr = new StringDecoder("utf8")
  let out = ""
  let err = ""
  return {
    stdout: (chunk) => {
      out += typeof chunk === "string" ? chunk : stdout.write(chunk)
    },
    stderr: (chunk) => {
      if (both) err += typeof chunk === "string" ? chunk : stderr.write(chunk)
    },
    end: () => ({ stdout: out + stdout.end(), stderr: err + stderr.end() }),
  }
}

/** `log` for stderr; stdout collected whole and unredacted instead of stored (TaskOptions.captureStdout). */
function withCapturedStdout(log: TaskLog): TaskLog {
  const captured = capturedLog(false)
  return {
    stdout: (chunk) => captured.stdout(chunk),
    stderr: (chunk) => log.stderr(chunk),
    end: () => ({ stdout: captured.end().stdout, stderr: log.end().stderr }),
  }
}
