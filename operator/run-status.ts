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
 * How long urgent() holds its fields for a write that goes anyway: the run's
 * end, or its `running` before a task starts or a gate waits. A webhook run
 * that answers and ends within it writes its status once, not twice (each
 * write is a request to the Kubernetes API, a commit, and an event to every
 * watcher); its caller waits for the end instead, which came 2-14 ms after
 * the answer under the webhook benchmark.
 */
const urgentHoldMs = 20

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
  /** While urgent()'s fields wait for a write: the hold's timer, and the promise urgent() answered. */
  #held: { timer: NodeJS.Timeout; written: PromiseWithResolvers<boolean> } | undefined

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

  /** Writes at once whatever is pending plus `fields` (and urgent fields held), in order after earlier writes. */
  now(fields: RunStatusFields): Promise<boolean> {
    this.#pending = { ...this.#pending, ...fields }
    // Like a progress write, a failure (logged) does not fail the caller; the final write carries it again.
    if (this.#held !== undefined) return this.#release().catch(() => true)
    return this.#flush()
  }

  /**
   * Writes `fields` within urgentHoldMs, with the run's end or its next
   * `now()` if either comes first, beside the ordered writes instead of
   * behind them, retried like the final write: for a field someone is
   * waiting on (`webhookResponse`: the API server holds the webhook's caller
   * until it appears). Only for fields no other write sets, since it may
   * land before or after a write already on its way. The final write carries
   * them again, so they are in the status when the run ends even if this
   * write failed or is still retrying. Updates still waiting for their
   * throttle go with it instead, behind the writes on their way.
   */
  urgent(fields: RunStatusFields): Promise<boolean> {
    this.#urgent = { ...this.#urgent, ...fields }
    this.#held ??= {
      timer: setTimeout(() => void this.#release().catch(() => {}), urgentHoldMs),
      written: Promise.withResolvers(),
    }
    return this.#held.written.promise
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
    this.#settleHeld(written)
    return written
  }

  /** Writes the urgent fields, and the updates waiting for their throttle with them, in order. */
  #release(): Promise<boolean> {
    let written: Promise<boolean>
    if (this.#pending === undefined) written = this.#retried(this.#urgent)
    else {
      // Updates are waiting (a run's `running`, held back until there is more to say): they go with it, in order.
      clearTimeout(this.#timer)
      this.#timer = undefined
      const status = { ...this.#pending, ...this.#urgent }
      this.#pending = undefined
      written = this.#chain.then(() => this.#retried(status))
      this.#chain = written.catch(() => true)
    }
    this.#settleHeld(written)
    return written
  }

  /** urgent()'s promise settles as `written` does, the write that carried its fields. */
  #settleHeld(written: Promise<boolean>): void {
    const held = this.#held
    if (held === undefined) return
    this.#held = undefined
    clearTimeout(held.timer)
    written.then(held.written.resolve, held.written.reject)
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
