import { errorMessage } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import {
  type GateObject,
  isFinal,
  isFinalGate,
  type RunObject,
  type ScheduleObject,
  scheduleLabel,
} from "../lib/kube/resources.ts"
import { defaultStartingDeadlineSeconds } from "./schedule-reconciler.ts"

export type RunRetentionOptions = {
  /** `--keep-runs`: finished Runs kept per Pipeline, newest first; 0 keeps all. */
  readonly keep: number
  /** The informers' caches: no list call per pass. */
  readonly run: (name: string) => RunObject | undefined
  readonly gates: () => readonly GateObject[]
  readonly schedule: (name: string) => ScheduleObject | undefined
  /** Deletes through the API; the Run reconciler's deleted() then forgets its output, as for any deleted Run. */
  readonly deleteRun: (name: string) => Promise<unknown>
  readonly now?: () => number
  readonly log: Log
}

/**
 * Run history retention, as Kubernetes Jobs' history limits: when a Run
 * finishes, its Pipeline's finished Runs beyond the newest `keep` are
 * deleted. Without it every Run stays in the API store, both roles' caches
 * and every reconciler pass for good (issue 20's soak).
 */
export class RunRetention {
  readonly #options: RunRetentionOptions
  readonly #due = new Set<string>()
  /** Each Pipeline's finished Runs by name: a pass reads the due Pipelines' alone, not every stored Run. */
  readonly #finished = new Map<string, Set<string>>()
  /** Asked to be deleted and not yet gone from the cache: not asked again. */
  readonly #deleting = new Set<string>()
  #scheduled: NodeJS.Immediate | undefined

  constructor(options: RunRetentionOptions) {
    this.#options = options
  }

  /** A Run changed; once it is finished, its Pipeline is pruned soon (a burst costs one pass). */
  changed(run: RunObject): void {
    if (this.#options.keep === 0 || !isFinal(run)) return
    const pipeline = run.spec.pipelineRef.name
    const finished = this.#finished.get(pipeline) ?? new Set<string>()
    finished.add(run.metadata?.name ?? "")
    this.#finished.set(pipeline, finished)
    this.#due.add(pipeline)
    this.#scheduled ??= setImmediate(() => this.#prune())
  }

  deleted(run: RunObject): void {
    const name = run.metadata?.name ?? ""
    this.#deleting.delete(name)
    const pipeline = run.spec.pipelineRef.name
    const finished = this.#finished.get(pipeline)
    finished?.delete(name)
    if (finished?.size === 0) this.#finished.delete(pipeline)
  }

  stop(): void {
    clearImmediate(this.#scheduled)
    this.#due.clear()
  }

  #prune(): void {
    this.#scheduled = undefined
    const pipelines = new Set(this.#due)
    this.#due.clear()
    const waited = new Set(
      this.#options
        .gates()
        .filter((gate) => !isFinalGate(gate))
        .map((gate) => gate.spec.runRef.name),
    )
    const now = (this.#options.now ?? Date.now)()
    for (const run of this.#beyondKeep(pipelines)) {
      const name = run.metadata?.name ?? ""
      if (this.#deleting.has(name) || waited.has(name) || this.#tickMayFireAgain(run, now)) continue
      this.#deleting.add(name)
      this.#options.deleteRun(name).catch((error) => {
        this.#deleting.delete(name)
        this.#options.log("run.prune-failed", { run: name, error: errorMessage(error) })
      })
    }
  }

  /** The finished Runs of `pipelines` beyond each one's newest `keep`, newest by creation (then start). */
  #beyondKeep(pipelines: ReadonlySet<string>): RunObject[] {
    const beyond: RunObject[] = []
    for (const pipeline of pipelines) {
      const names = this.#finished.get(pipeline)
      if (names === undefined || names.size <= this.#options.keep) continue
      const runs: RunObject[] = []
      for (const name of names) {
        const run = this.#options.run(name)
        if (run !== undefined) runs.push(run)
      }
      // Not push(...): a pipeline may be tens of thousands of runs over a new, lower --keep-runs.
      for (const run of newestFirst(runs).slice(this.#options.keep)) beyond.push(run)
    }
    return beyond
  }

  /**
   * A schedule's Run is named after its tick, and that name is what keeps the
   * tick from firing twice (a 409). Deleted within the Schedule's starting
   * deadline, a restart before the Schedule's status moved on could fire the
   * tick again; past the deadline that tick never fires.
   */
  #tickMayFireAgain(run: RunObject, now: number): boolean {
    const schedule = run.metadata?.labels?.[scheduleLabel]
    if (schedule === undefined) return false
    const deadlineSeconds =
      this.#options.schedule(schedule)?.spec.startingDeadlineSeconds ?? defaultStartingDeadlineSeconds
    return now - created(run) <= deadlineSeconds * 1000
  }
}

/** Creation times have whole seconds; the start time (milliseconds) orders runs created in the same second. */
function newestFirst(runs: readonly RunObject[]): RunObject[] {
  return runs
    .map((run) => ({ run, created: created(run), started: run.status?.startedAt ?? "" }))
    .sort((a, b) => b.created - a.created || (b.started < a.started ? -1 : b.started > a.started ? 1 : 0))
    .map(({ run }) => run)
}
const created = (run: RunObject) => new Date(run.metadata?.creationTimestamp ?? 0).getTime()
