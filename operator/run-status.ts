import { errorMessage } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { TaskRecord } from "../lib/core/run.ts"
import { ApiException } from "../lib/kube/client-node.js"
import type { RunStatusFields, StatusTask } from "../lib/kube/resources.ts"
import type { RunObserver } from "./engine/run-observer.ts"

/** Writes one Run's status; resolves false when the Run is gone. */
export type StatusWrite = (status: RunStatusFields) => Promise<boolean>

const finalAttempts = 8

/**
 * Mirrors one run's progress into its Run's status without writing on every
 * change: updates within `throttleMs` are coalesced into one merge patch.
 * Writes go out one at a time, in order, so an older state never lands after
 * a newer one. A progress write that fails is dropped (the next one carries
 * the whole task list again); the final write is retried, since a run left
 * `running` in its resource would be resumed by the next operator.
 */
export class RunStatusWriter {
  readonly #write: StatusWrite
  readonly #throttleMs: number
  readonly #log: Log
  readonly #run: string
  #pending: RunStatusFields | undefined
  #timer: NodeJS.Timeout | undefined
  #chain: Promise<unknown> = Promise.resolve()
  #closed = false
  /** Fields written by urgent(), repeated in the final write. */
  #urgent: RunStatusFields = {}

  constructor(options: { run: string; write: StatusWrite; throttleMs: number; log: Log }) {
    this.#run = options.run
    this.#write = options.write
    this.#throttleMs = options.throttleMs
    this.#log = options.log
  }

  /** Merges `fields` into the next write, which leaves within throttleMs. */
  update(fields: RunStatusFields): void {
    if (this.#closed) return
    this.#pending = { ...this.#pending, ...fields }
    this.#timer ??= setTimeout(() => {
      this.#timer = undefined
      this.#flush()
    }, this.#throttleMs)
  }

  /** Writes at once whatever is pending plus `fields`, in order after earlier writes. */
  now(fields: RunStatusFields): Promise<boolean> {
    this.#pending = { ...this.#pending, ...fields }
    return this.#flush()
  }

  /**
   * Writes `fields` at once, beside the ordered writes instead of behind
   * them, retried like the final write: for a field someone is waiting on
   * (`webhookResponse`: the API server holds the webhook's caller until it
   * appears). Only for fields no other write sets, since it may land before
   * or after a write already on its way. The final write carries them again,
   * so they are in the status when the run ends even if this write failed
   * or is still retrying. Updates still waiting for their throttle go with
   * it instead, behind the writes on their way.
   */
  urgent(fields: RunStatusFields): Promise<boolean> {
    this.#urgent = { ...this.#urgent, ...fields }
    if (this.#pending === undefined) return this.#retried(fields)
    // Updates are waiting (a run's `running`, held back until there is more to say): they go with it, in order.
    clearTimeout(this.#timer)
    this.#timer = undefined
    const status = { ...this.#pending, ...fields }
    this.#pending = undefined
    const written = this.#chain.then(() => this.#retried(status))
    this.#chain = written.catch(() => true)
    return written
  }

  /** The last write: pending updates, urgent fields and `fields`, retried until it lands or the Run is gone. */
  async final(fields: RunStatusFields): Promise<boolean> {
    this.#closed = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    const status = { ...this.#pending, ...this.#urgent, ...fields }
    this.#pending = undefined
    const written = this.#chain.then(() => this.#retried(status))
    this.#chain = written
    return written
  }

  #flush(): Promise<boolean> {
    clearTimeout(this.#timer)
    this.#timer = undefined
    const status = this.#pending
    this.#pending = undefined
    if (status === undefined) return this.#chain.then(() => true)
    const written = this.#chain.then(() =>
      this.#write(status).catch((error: unknown) => {
        this.#log("run.status-write-failed", { run: this.#run, error: errorMessage(error) })
        return true
      }),
    )
    this.#chain = written
    return written
  }

  async #retried(status: RunStatusFields): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#write(status)
      } catch (error) {
        // 4xx other than a conflict or throttling will not get better by asking again.
        const code = error instanceof ApiException ? error.code : 0
        const hopeless = code >= 400 && code < 500 && code !== 409 && code !== 429
        this.#log("run.status-write-failed", { run: this.#run, attempt, error: errorMessage(error) })
        if (hopeless || attempt >= finalAttempts) throw error
        await new Promise((resolve) => setTimeout(resolve, Math.min(100 * 2 ** attempt, 5_000)))
      }
    }
  }
}

/** A task as `status.tasks` shows it: the record without the run id. */
export function statusTask(record: TaskRecord): StatusTask {
  const { path, name, status, code, startedAt, endedAt } = record
  return { path, name, status, code, startedAt, endedAt }
}

/**
 * The engine's observer for a run of the operator: keeps the task list in
 * start order and hands it to `changed` on every task start and end. Output
 * is not mirrored: it is in the log store.
 */
export function taskListObserver(tasks: Map<string, StatusTask>, changed: () => void): RunObserver {
  const record = (task: TaskRecord) => {
    tasks.set(task.path, statusTask(task))
    changed()
  }
  return { taskStarted: record, taskFinished: record, output() {}, runFinished() {} }
}
