import { formatDuration } from "../lib/core/duration.ts"
import { errorMessage } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { RunResult, TaskRecord } from "../lib/core/run.ts"
import type { FinalRunStatus, RunStatus } from "../lib/core/status.ts"
import { consoleTaskPath } from "../lib/core/task-path.ts"
import { type WebhookRequest, type WebhookResponse, webhookBodyAttachment } from "../lib/core/webhook-request.ts"
import type { V1OwnerReference } from "../lib/kube/client-node.js"
import type { Informer } from "../lib/kube/informer.ts"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import {
  type Condition,
  type GateObject,
  isFinal,
  kubeTime,
  type PipelineObject,
  type PipelineSpec,
  pipelineOwnerReference,
  type RunObject,
  type RunStatusFields,
  runAnnotations,
  runContentAnnotations,
  type StatusTask,
  withCondition,
} from "../lib/kube/resources.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import type { OperatorMetrics } from "../lib/metrics/metrics.ts"
import { type ContentType, contentTypeOf } from "../lib/script/content-type.ts"
import { scriptFilename } from "../lib/script/pipeline-check.ts"
import type { RunSecrets } from "../lib/secrets/secret-store.ts"
import type { DriverPool } from "./driver-pool.ts"
import { type Driver, openingAfter } from "./drivers/driver.ts"
import type { NetworkSettings, TriggerType } from "./engine/engine.ts"
import type { RunGates } from "./engine/gates.ts"
import { journalFromStore } from "./engine/journal.ts"
import { engineFor, type PipelineEngine } from "./engine/pipeline-engine.ts"
import { closedTask } from "./engine/run-context.ts"
import type { RunObserver } from "./engine/run-observer.ts"
import type { SandboxLimits } from "./engine/sandbox/sandbox.ts"
import { RunAborted, type RunEnding, settle } from "./engine/settle.ts"
import type { GateKeeper } from "./gate-keeper.ts"
import { JobSlots } from "./job-slots.ts"
import type { PipelineGenerations } from "./pipeline-reconciler.ts"
import { pipelineVersions } from "./pipeline-versions.ts"
import { RunStatusWriter, statusTask, taskListObserver } from "./run-status.ts"

export type RunReconcilerOptions = {
  readonly client: ResourceClient
  /** The Pipelines as the operator last saw them; a miss or an older generation is read from the API. */
  readonly pipelines: Pick<Informer<PipelineObject>, "get">
  readonly generations: PipelineGenerations
  readonly store: LogStore
  readonly secrets: RunSecrets
  /** The `webhooks` feature: runs a webhook started see its request and may answer it. */
  readonly webhooks: boolean
  readonly drivers: DriverPool
  /** The driver of a pipeline whose spec names none (`--driver`). */
  readonly defaultDriver: string
  readonly limits: SandboxLimits
  /** YAML pipelines: the small image of mock resources' mirror_self and runnel's file tasks (`--mock-image`). */
  readonly mockImage: string
  /** fetch(), notifications and native git; the engine's defaults when absent. */
  readonly network?: NetworkSettings
  /** The `gates` feature: absent, a pipeline's gate fails with `gates feature is not enabled`. */
  readonly gates?: Pick<GateKeeper, "forRun">
  /** `--max-in-flight`: runs executing at once (a run waiting on a gate does not count); the rest wait, first in, first out. */
  readonly maxInFlight: number
  /** Progress writes to a Run's status within this window are coalesced into one. */
  readonly statusThrottleMs: number
  /** Task and run durations, for monitoring; nothing is recorded without it. */
  readonly metrics?: Pick<OperatorMetrics, "taskEnded" | "runEnded">
  readonly log: Log
}

const retryAfterFailureMs = 1_000

/**
 * Why a run waiting on a gate stops executing at shutdown: it is not ended
 * but left `running`, so the next operator resumes it, still waiting on the
 * same gate. A person's approval may take a weekend; a restart must not end it.
 */
class LeftWaiting extends RunAborted {
  constructor() {
    super("runnel shut down while the run waited on a gate; the next start resumes it")
  }
}

type ActiveRun = { readonly controller: AbortController; readonly done: Promise<void> }

/** Which content a run executes, and what the operator records about it. */
type Plan = {
  readonly spec: PipelineSpec
  readonly generation: number
  readonly condition?: Condition
}

type Mode = "admit" | "resume"

/** A run ready for its engine (#prepare). */
type Execution = {
  readonly mode: Mode
  readonly pipeline: PipelineObject
  readonly spec: PipelineSpec
  readonly contentType: ContentType
  readonly engine: PipelineEngine
  readonly webhook: WebhookRequest | undefined
  readonly driver: Driver
  readonly driverName: string
  /** When the run started: now when admitted, its first attempt's start when resumed. */
  readonly startedAt: string
}

/**
 * Executes Runs: admission, execution with the engine, status, stop, resume.
 *
 * Level-triggered: every event schedules one pass over the Runs of the
 * informer's cache that are not final, which decides from each Run's
 * resource alone (and what this process is doing) what must happen:
 * - no phase or `queued`: admitted when fewer than maxInFlight runs execute,
 *   oldest first (creationTimestamp, then the order the operator saw them,
 *   then name); else marked `queued`. A Run naming a missing Pipeline ends
 *   `error` with a message that names it.
 * - `running` but not executing here: an earlier operator was interrupted
 *   while running it. It is resumed, replaying its script with the journal of
 *   the tasks it finished, if its Pipeline still has the content it started
 *   with; otherwise it ends `error` with the reason.
 * - `spec.stop: true` or deletion: a queued Run ends `aborted`; an executing
 *   one is aborted (its tasks are killed) and ends `aborted`.
 * - a final phase: nothing; the pass does not even look at it, since a
 *   store keeps finished Runs by the thousand (`--keep-runs 0`: all of them)
 *   and a pass runs after every burst of events.
 * A pass is synchronous; the writes and executions it starts run beside it,
 * and this process's own bookkeeping keeps a later pass (which may still see
 * an older version of a Run) from doing the same thing twice.
 */
export class RunReconciler {
  readonly #options: RunReconcilerOptions
  #informer: Informer<RunObject> | undefined
  readonly #active = new Map<string, ActiveRun>()
  /** Executing runs that wait on a gate: they hold no --max-in-flight slot. */
  readonly #waiting = new Set<string>()
  /** The conditions this process last wrote for an executing run, so that one write does not lose another. */
  readonly #conditions = new Map<string, Condition[]>()
  /** Runs this process ended, until the cache shows their final phase. */
  readonly #settled = new Set<string>()
  /** Runs marked queued (or being marked) by this process, and that write. */
  readonly #enqueued = new Map<string, Promise<void>>()
  /** The order in which this process first saw each Run: the watch delivers creations in order. */
  readonly #arrival = new Map<string, number>()
  /** The Runs whose cached version is not final: what a pass looks at. */
  readonly #unfinished = new Set<string>()
  #arrivals = 0
  /** YAML jobs' serial, serial_groups and max_in_flight across the runs of a pipeline. */
  readonly #jobSlots = new JobSlots()
  /** Runs the last pass left waiting for a --max-in-flight slot. */
  #queued = 0
  #draining = false
  #stopped = false
  #scheduled: NodeJS.Immediate | undefined
  readonly #hurry = Promise.withResolvers<"hurry">()

  constructor(options: RunReconcilerOptions) {
    this.#options = options
  }

  attach(informer: Informer<RunObject>): void {
    this.#informer = informer
    for (const run of informer.list()) this.#track(run)
    this.schedule()
  }

  changed(run: RunObject): void {
    this.#track(run)
    this.schedule()
  }

  /** Its output goes with it, however it was deleted (the API, kubectl, retention); a running one's once it has stopped writing. */
  deleted(run: RunObject): void {
    const name = run.metadata?.name ?? ""
    const active = this.#active.get(name)
    active?.controller.abort(new RunAborted("the Run was deleted"))
    const forget = () => {
      try {
        this.#options.store.forget(name)
      } catch (error) {
        this.#options.log("run.forget-failed", { run: name, error: errorMessage(error) })
      }
    }
    if (active === undefined) forget()
    else void active.done.finally(forget)
    this.#done(name)
    this.schedule()
  }

  /** Runs a pass soon; a burst of events costs one pass. */
  schedule(): void {
    if (this.#stopped) return
    this.#scheduled ??= setImmediate(() => {
      this.#scheduled = undefined
      this.#pass()
    })
  }

  /**
   * Stops admitting and resuming; waits up to `graceMs` for executing runs to
   * finish, then aborts the rest (they end `aborted`) and waits for their
   * final status. Queued runs stay queued for the next operator.
   */
  async drain(graceMs: number): Promise<void> {
    this.#draining = true
    for (const name of this.#waiting) this.#active.get(name)?.controller.abort(new LeftWaiting())
    const all = async () => {
      await Promise.all([...this.#active.values()].map((run) => run.done))
    }
    let timer: NodeJS.Timeout | undefined
    const graceOver = new Promise<"grace-over">((resolve) => {
      timer = setTimeout(() => resolve("grace-over"), graceMs)
    })
    const outcome = await Promise.race([all(), graceOver, this.#hurry.promise])
    clearTimeout(timer)
    if (outcome !== undefined) {
      this.abortAll()
      await all()
    }
    this.#stopped = true
    clearImmediate(this.#scheduled)
    this.#scheduled = undefined
    await Promise.allSettled([...this.#enqueued.values()])
  }

  /** Aborts every executing run: shutdown without (more) grace. */
  abortAll(): void {
    const reason = new RunAborted(
      "runnel shut down before the run finished (it waited --shutdown-grace for running runs)",
    )
    for (const run of this.#active.values()) run.controller.abort(reason)
    this.#hurry.resolve("hurry")
  }

  /** Runs waiting for a --max-in-flight slot, as the last pass left them. */
  get queued(): number {
    return this.#queued
  }

  /** Runs and YAML jobs waiting for their pipeline's own limits (max_in_flight, serial, serial_groups). */
  get waitingForPipeline(): number {
    return this.#jobSlots.waiting
  }

  /** The Runs of the cache by phase; a Run without one yet is queued, as the API shows it. */
  runsByPhase(): Map<RunStatus, number> {
    const counts = new Map<RunStatus, number>()
    for (const run of this.#informer?.list() ?? []) {
      const phase = run.status?.phase ?? "queued"
      counts.set(phase, (counts.get(phase) ?? 0) + 1)
    }
    return counts
  }

  /** Notes a Run's newest version: when this process first saw it, and whether a pass must look at it. */
  #track(run: RunObject): void {
    const name = run.metadata?.name
    if (name === undefined) return
    if (isFinal(run)) {
      this.#done(name)
      return
    }
    this.#unfinished.add(name)
    if (!this.#arrival.has(name)) this.#arrival.set(name, ++this.#arrivals)
  }

  /** Nothing is left to do for a Run (final or deleted): what this process noted about it goes. */
  #done(name: string): void {
    this.#unfinished.delete(name)
    this.#settled.delete(name)
    this.#enqueued.delete(name)
    this.#arrival.delete(name)
  }

  #pass(): void {
    const waiting: RunObject[] = []
    for (const name of this.#unfinished) {
      const run = this.#informer?.get(name)
      if (run === undefined) continue
      const active = this.#active.get(name)
      if (active !== undefined) {
        if (run.spec.stop === true) active.controller.abort(new RunAborted("the run was stopped (spec.stop is true)"))
        else if (run.metadata?.deletionTimestamp !== undefined) {
          active.controller.abort(new RunAborted("the Run was deleted"))
        }
        continue
      }
      if (this.#settled.has(name) || run.metadata?.deletionTimestamp !== undefined) continue
      if (run.spec.stop === true) {
        const when = run.status?.phase === "running" ? "while runnel was down" : "before it started"
        this.#endEarly(run, "aborted", `the run was stopped ${when} (spec.stop is true)`)
      } else if (run.status?.phase === "running") {
        // Admitted by an operator that is gone: resumed whatever maxInFlight says, since it was admitted already.
        if (!this.#draining) this.#start(run, "resume")
      } else {
        waiting.push(run)
      }
    }
    waiting.sort((a, b) => this.#compareAge(a, b))
    let queued = 0
    for (const run of waiting) {
      if (this.#draining || this.#active.size - this.#waiting.size >= this.#options.maxInFlight) {
        this.#enqueue(run)
        queued++
      } else this.#start(run, "admit")
    }
    this.#queued = queued
  }

  #compareAge(a: RunObject, b: RunObject): number {
    const created = (run: RunObject) => String(run.metadata?.creationTimestamp ?? "")
    const arrival = (run: RunObject) => this.#arrival.get(run.metadata?.name ?? "") ?? 0
    const name = (run: RunObject) => run.metadata?.name ?? ""
    return (
      created(a).localeCompare(created(b)) ||
      arrival(a) - arrival(b) ||
      (name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : 0)
    )
  }

  /** Marks a waiting run `queued` and owned by its Pipeline, once; a missing Pipeline ends it `error`. */
  #enqueue(run: RunObject): void {
    const name = run.metadata?.name ?? ""
    if (this.#enqueued.has(name)) return
    const { client, log } = this.#options
    const written = (async () => {
      const pipeline = await this.#pipeline(run.spec.pipelineRef.name)
      if (this.#active.has(name)) return // admitted meanwhile: the execution decides
      if (pipeline === undefined) {
        this.#endEarly(run, "error", this.#missingPipeline(run))
        return
      }
      const owners = ownerReferences(run, pipeline)
      if (owners !== undefined) await client.patchRunMetadata(name, { ownerReferences: owners })
      // Admitted or ended (stopped) meanwhile: those writes wait for this one, and `queued` must not follow them.
      if (run.status?.phase !== "queued" && !this.#active.has(name) && !this.#settled.has(name)) {
        await client.patchRunStatus(name, { phase: "queued", code: null })
      }
    })().catch((error: unknown) => {
      log("run.enqueue-failed", { run: name, error: errorMessage(error) })
      this.#enqueued.delete(name) // asked again on the next pass
    })
    this.#enqueued.set(name, written)
  }

  #start(run: RunObject, mode: Mode): void {
    const name = run.metadata?.name ?? ""
    const controller = new AbortController()
    const done = this.#run(run, mode, controller.signal)
      .catch(async (error: unknown) => {
        // The API refused a write before the run started; it is admitted again, but not in a tight loop.
        this.#options.log("run.execute-failed", { run: name, error: errorMessage(error) })
        await new Promise((resolve) => setTimeout(resolve, retryAfterFailureMs))
      })
      .finally(() => {
        this.#active.delete(name)
        this.#waiting.delete(name)
        this.#conditions.delete(name)
        this.schedule()
      })
    this.#active.set(name, { controller, done })
  }

  /** Admits or resumes one run: prepares it, executes it with its engine, writes how it ended. */
  async #run(run: RunObject, mode: Mode, signal: AbortSignal): Promise<void> {
    const name = run.metadata?.name ?? ""
    // A queued-write still on its way lands before the execution's writes, never after them.
    await this.#enqueued.get(name)
    const writer = this.#statusWriter(name)
    const prepared = await this.#prepare(run, mode, writer)
    if (prepared === undefined) return // deleted meanwhile
    if ("status" in prepared) return this.#end(writer, run, prepared)
    const result = await this.#execute(run, prepared, writer, signal)
    if (signal.reason instanceof LeftWaiting) {
      this.#options.log("run.left-waiting", { run: name })
      return
    }
    // A resumed run's tasks include those of its earlier attempts, which the engine did not see.
    await this.#finish(writer, run, result, closeLeftoverTasks(this.#options.store, name, result.status))
  }

  /**
   * What a run needs before its engine starts: its Pipeline's content, the
   * engine, the webhook request, the driver; for an admitted run, also its
   * metadata written and its `running` on its way. A RunEnding says why it
   * cannot start; undefined, that the Run was deleted meanwhile.
   */
  async #prepare(run: RunObject, mode: Mode, writer: RunStatusWriter): Promise<Execution | RunEnding | undefined> {
    const { client, store, log } = this.#options
    const name = run.metadata?.name ?? ""
    const pipelineName = run.spec.pipelineRef.name
    const refused = (message: string): RunEnding => ({ status: "error", message })

    const pipeline = await this.#pipeline(pipelineName, run.spec.pipelineGeneration)
    if (pipeline === undefined) return refused(this.#missingPipeline(run))
    const plan = mode === "resume" ? this.#resumePlan(run, pipeline) : this.#admitPlan(run, pipeline)
    if (typeof plan === "string") return refused(plan)
    const contentType = contentTypeOf(plan.spec)
    const engine = engineFor(contentType)
    if (mode === "resume" && !engine.resumes) {
      return refused(
        `the operator restarted while this ${engine.kind} run of "${pipelineName}" was running; ${engine.kind} runs are not resumed, trigger it again`,
      )
    }
    // With the `webhooks` feature off, pipelines get no webhook data and no response channel.
    const webhook = this.#options.webhooks ? webhookOf(run, store) : undefined
    if (typeof webhook === "string") return refused(webhook)
    const driverName = plan.spec.driver || this.#options.defaultDriver
    let driver: Driver
    try {
      driver = await this.#options.drivers.get(driverName, plan.spec.driverConfig ?? {})
    } catch (error) {
      return refused(`pipeline "${pipelineName}": ${errorMessage(error)}`)
    }

    let startedAt = run.status?.startedAt ?? new Date().toISOString()
    if (mode === "admit") {
      startedAt = new Date().toISOString()
      const owners = ownerReferences(run, pipeline)
      const annotations = runContentAnnotations(plan.generation, plan.spec.content)
      // A Run the API server created carries these already (the usual case): no patch, one write less per run.
      if (owners !== undefined || !sameAnnotations(run, annotations)) {
        const annotated = await client.patchRunMetadata(name, {
          ...(owners === undefined ? {} : { ownerReferences: owners }),
          annotations,
        })
        if (annotated === undefined) return undefined
      }
      // Later condition writes (a gate's) start from these, so a merge patch of the list keeps this one.
      if (plan.condition !== undefined)
        this.#conditions.set(name, withCondition(run.status?.conditions, plan.condition))
      // Held back like progress, so that a run that answers its webhook or ends within the throttle says so in
      // the same write; it lands before the run's first task starts or its first gate waits.
      writer.update({
        phase: "running",
        code: null,
        message: "",
        startedAt,
        finishedAt: null,
        tasks: [],
        ...(plan.condition === undefined ? {} : { conditions: this.#conditions.get(name) ?? [] }),
      })
      // A restarted operator resumes a `running` run with its journal but admits a `queued` one again: `running`
      // is in the status before any task starts, so no task runs twice.
      driver = openingAfter(driver, () => writer.now({}))
    }
    log(mode === "admit" ? "run.started" : "run.resumed", { run: name, pipeline: pipelineName, driver: driverName })
    return { mode, pipeline, spec: plan.spec, contentType, engine, webhook, driver, driverName, startedAt }
  }

  /** Runs a prepared run with its engine, mirroring its tasks and its webhook answer into the Run's status. */
  async #execute(run: RunObject, execution: Execution, writer: RunStatusWriter, signal: AbortSignal) {
    const { client, store, log } = this.#options
    const { mode, pipeline, spec, webhook } = execution
    const name = run.metadata?.name ?? ""
    const pipelineName = run.spec.pipelineRef.name
    const tasks = new Map<string, StatusTask>()
    // A resumed run keeps the tasks of its earlier attempts; those it finished return their recorded results.
    const journal = mode === "resume" ? journalFromStore(store, name) : undefined
    if (mode === "resume") for (const record of store.tasks(name)) tasks.set(record.path, statusTask(record))
    const observer = measured(
      taskListObserver(tasks, () => writer.update({ tasks: [...tasks.values()] })),
      execution.driverName,
      this.#options.metrics,
    )
    // An earlier attempt answered already: the resumed script's http.respond() is not sent again.
    let responded = run.status?.webhookResponse !== undefined
    const respond = (response: WebhookResponse) => {
      if (responded) return
      responded = true
      log("run.webhook-responded", { run: name, status: response.status })
      writer.urgent({ webhookResponse: response }).catch((error: unknown) => {
        log("run.webhook-response-failed", { run: name, error: errorMessage(error) })
      })
    }
    const pipelineUid = pipeline.metadata?.uid ?? ""
    const keeper = this.#options.gates?.forRun(run, (gate) => this.#waitingOn(name, writer, run, gate))
    // A gate may hold the run for hours and be seen by anyone: what the run did before it is committed first,
    // so a resume after a kill finds those tasks finished instead of running them again.
    const gates: RunGates | undefined = keeper && {
      wait: async (request, notice, signal) => {
        store.commit(name)
        await writer.now({})
        return keeper.wait(request, notice, signal)
      },
    }
    return execution.engine.run(
      {
        runId: name,
        pipelineId: pipelineUid,
        pipelineName,
        filename: scriptFilename(pipelineName, execution.contentType),
        source: spec.content,
        triggeredBy: triggerOf(run),
        args: run.spec.trigger?.args ?? [],
        startedAt: execution.startedAt,
        ...(webhook === undefined ? {} : { webhook }),
        ...(journal === undefined ? {} : { journal }),
        ...(run.spec.trigger?.jobs === undefined ? {} : { jobs: run.spec.trigger.jobs }),
      },
      {
        driver: execution.driver,
        driverName: execution.driverName,
        store,
        secrets: this.#options.secrets.forRun({ pipelineUid, runId: name }),
        observer,
        limits: this.#options.limits,
        respond,
        mockImage: this.#options.mockImage,
        versions: pipelineVersions(client, () => this.#options.pipelines.get(pipelineName), pipelineName, name),
        setPipeline: (target, yaml) => client.setPipeline(target === "self" ? pipelineName : target, yaml),
        jobSlot: (job, limit, slotSignal) => this.#jobSlots.acquire(pipelineUid, job, limit, slotSignal),
        runSlot: (limit, slotSignal) => this.#jobSlots.acquireRun(pipelineUid, limit, slotSignal),
        ...(gates === undefined ? {} : { gates }),
        ...(this.#options.network === undefined ? {} : { network: this.#options.network }),
      },
      signal,
    )
  }

  /**
   * A run starts (`gate`) or stops (undefined) waiting on a gate: it gives
   * back its --max-in-flight slot, so queued runs start meanwhile, and its
   * status names the gate (condition WaitingForApproval). Once approved it
   * goes on at once, even if that makes one more run than --max-in-flight
   * executing for a while: it was admitted already, as a resumed run is.
   */
  #waitingOn(name: string, writer: RunStatusWriter, run: RunObject, gate: GateObject | undefined): void {
    if (gate === undefined) this.#waiting.delete(name)
    else {
      this.#waiting.add(name)
      if (this.#draining) this.#active.get(name)?.controller.abort(new LeftWaiting())
    }
    const id = gate?.metadata?.name ?? ""
    const condition: Condition =
      gate === undefined
        ? {
            type: "WaitingForApproval",
            status: "False",
            reason: "GateResolved",
            message: "",
            lastTransitionTime: kubeTime(),
          }
        : {
            type: "WaitingForApproval",
            status: "True",
            reason: "GatePending",
            message: `waiting for approval of gate "${gate.spec.name}" (${id}): POST /api/gates/${id}/approve or runnel gate approve ${id}`,
            lastTransitionTime: kubeTime(),
          }
    this.#conditions.set(name, withCondition(this.#conditions.get(name) ?? run.status?.conditions, condition))
    writer.update({ conditions: this.#conditions.get(name) ?? [] })
    this.schedule()
  }

  /** Ends a run that did not execute here (refused, or stopped before it started): settled like any other. */
  #end(writer: RunStatusWriter, run: RunObject, ending: RunEnding): Promise<void> {
    const result = settle({ runId: run.metadata?.name ?? "", startedAt: run.status?.startedAt ?? null }, ending)
    return this.#finish(writer, run, result)
  }

  /**
   * Writes a settled run's end into its Run, the one place that does: its
   * final status (with `tasks` when it executed here), then releases its
   * secrets. Its code is the result's, so runExitCode's.
   */
  async #finish(writer: RunStatusWriter, run: RunObject, result: RunResult, tasks?: readonly TaskRecord[]) {
    const name = run.metadata?.name ?? ""
    this.#settled.add(name)
    await this.#enqueued.get(name) // a `queued` on its way lands first
    await writer.final({
      ...finalStatus(result),
      ...(tasks === undefined ? {} : { tasks: tasks.map(statusTask) }),
    })
    await this.#options.secrets.ended(name)
    const seconds =
      result.startedAt === null ? 0 : (Date.parse(result.finishedAt) - Date.parse(result.startedAt)) / 1000
    this.#options.metrics?.runEnded(result.status, Math.max(0, seconds))
    this.#options.log("run.finished", { run: name, phase: result.status, code: result.code, message: result.message })
  }

  #endEarly(run: RunObject, phase: FinalRunStatus, message: string): void {
    const name = run.metadata?.name ?? ""
    this.#end(this.#statusWriter(name), run, { status: phase, message }).catch((error: unknown) => {
      this.#options.log("run.end-failed", { run: name, error: errorMessage(error) })
    })
  }

  #statusWriter(name: string): RunStatusWriter {
    return new RunStatusWriter({
      run: name,
      write: async (status) => (await this.#options.client.patchRunStatus(name, status)) !== undefined,
      throttleMs: this.#options.statusThrottleMs,
      log: this.#options.log,
    })
  }

  /** The Pipeline from the cache, or from the API when the cache misses it or lags behind `generation`. */
  async #pipeline(name: string, generation?: number): Promise<PipelineObject | undefined> {
    const cached = this.#options.pipelines.get(name)
    if (cached !== undefined && (generation === undefined || (cached.metadata?.generation ?? 0) >= generation)) {
      return cached
    }
    return this.#options.client.getPipeline(name)
  }

  #missingPipeline(run: RunObject): string {
    const { name } = run.spec.pipelineRef
    return `pipeline "${name}" not found in namespace "${this.#options.client.namespace}"; create it, or create a Run whose spec.pipelineRef.name names an existing pipeline`
  }

  /** The content a newly admitted run executes: the generation it names when known, else the current one. */
  #admitPlan(run: RunObject, pipeline: PipelineObject): Plan | string {
    const pipelineName = run.spec.pipelineRef.name
    const current = pipeline.metadata?.generation ?? 1
    const requested = run.spec.pipelineGeneration
    if (requested === undefined || requested === current) return { spec: pipeline.spec, generation: current }
    const kept = this.#options.generations.get(pipeline.metadata?.uid ?? "", requested)
    if (kept !== undefined) return { spec: kept, generation: requested }
    if (requested > current) {
      return `the run names generation ${requested} of pipeline "${pipelineName}", which is at generation ${current}`
    }
    return {
      spec: pipeline.spec,
      generation: current,
      condition: {
        type: "PipelineGeneration",
        status: "False",
        reason: "PipelineChanged",
        message: `the run names generation ${requested} of pipeline "${pipelineName}", which moved on to generation ${current} before the run started; runnel keeps no older content, so the run executes generation ${current}`,
        lastTransitionTime: kubeTime(),
      },
    }
  }

  /** A run found `running` resumes only on the content it started with. */
  #resumePlan(run: RunObject, pipeline: PipelineObject): Plan | string {
    const pipelineName = run.spec.pipelineRef.name
    const annotations = run.metadata?.annotations ?? {}
    const startedWith = annotations[runAnnotations.contentSha256]
    const generation = pipeline.metadata?.generation ?? 1
    if (startedWith === undefined) {
      return "the run was interrupted, and it does not record which pipeline content it ran, so it cannot be resumed; start a new run"
    }
    if (startedWith !== runContentAnnotations(generation, pipeline.spec.content)[runAnnotations.contentSha256]) {
      return `the run was interrupted, and pipeline "${pipelineName}" changed since it started (generation ${annotations[runAnnotations.generation] ?? "?"}, now ${generation}), so it cannot be resumed; start a new run`
    }
    return { spec: pipeline.spec, generation }
  }
}

/** The run's ownerReferences with its Pipeline added, or undefined when it is there already. */
function ownerReferences(run: RunObject, pipeline: PipelineObject): V1OwnerReference[] | undefined {
  const existing = run.metadata?.ownerReferences ?? []
  const uid = pipeline.metadata?.uid ?? ""
  if (existing.some((owner) => owner.uid === uid)) return undefined
  return [
    ...existing,
    {
      ...pipelineOwnerReference(pipeline),
      controller: !existing.some((owner) => owner.controller === true),
    },
  ]
}

/** A settled run as its Run's status shows it; a run that never started has no start time and no duration. */
function finalStatus(result: RunResult): RunStatusFields {
  const { status, code, message, startedAt, finishedAt } = result
  const fields: RunStatusFields = { phase: status, code, message: message ?? "", finishedAt }
  if (startedAt === null) return fields
  return { ...fields, startedAt, duration: formatDuration(Date.parse(finishedAt) - Date.parse(startedAt)) }
}

/**
 * The run's task records once it has ended. A task an earlier attempt left
 * `running` that the resumed script never reached again is closed here:
 * the console task with the run's status, any other as `aborted`.
 */
function closeLeftoverTasks(store: LogStore, runId: string, status: FinalRunStatus): TaskRecord[] {
  const endedAt = new Date().toISOString()
  return store.tasks(runId).map((task) => {
    if (task.status !== "pending" && task.status !== "running") return task
    const closed = closedTask(task, status, endedAt)
    store.saveTask(closed)
    return closed
  })
}

/**
 * The request of a Run a webhook started (`spec.trigger.webhook`), for the
 * script's `http.request()`; undefined for other runs. A body too large for
 * the Run is read from the log store, where the API server put it before it
 * created the Run; a string says why it cannot be had.
 */
function webhookOf(run: RunObject, store: LogStore): WebhookRequest | string | undefined {
  const trigger = run.spec.trigger
  if (trigger?.type !== "webhook" || trigger.webhook === undefined) return undefined
  const { provider, eventType, method, url, headers, query, body, bodyStored } = trigger.webhook
  const text = bodyStored === true ? store.attachment(run.metadata?.name ?? "", webhookBodyAttachment) : body
  if (text === undefined && bodyStored === true) {
    return "the webhook that started this run had a body too large for the Run, kept in runnel's log store (spec.trigger.webhook.bodyStored), and the store does not have it: it was reset or is another installation's; send the webhook again"
  }
  return {
    provider: provider ?? "generic",
    eventType: eventType ?? "",
    method: method ?? "POST",
    url: url ?? "",
    headers: headers ?? {},
    query: query ?? {},
    body: text ?? "",
  }
}

/**
 * The observer with each finished task's duration recorded under the run's driver: tasks that ran, that
 * is, not the script's console (it lasts as long as the run) nor a skipped job or a task that never started.
 */
function measured(observer: RunObserver, driver: string, metrics: RunReconcilerOptions["metrics"]): RunObserver {
  if (metrics === undefined) return observer
  return {
    ...observer,
    taskFinished(task) {
      observer.taskFinished(task)
      if (task.path === consoleTaskPath || task.status === "skipped" || task.startedAt === null) return
      const seconds = (Date.parse(task.endedAt ?? "") - Date.parse(task.startedAt)) / 1000
      if (seconds >= 0) metrics.taskEnded(driver, task.status, seconds)
    },
  }
}

function triggerOf(run: RunObject): TriggerType {
  const type = run.spec.trigger?.type
  return type === "webhook" || type === "schedule" ? type : "manual"
}

/** Whether the Run's annotations hold every one of `wanted`. */
const sameAnnotations = (run: RunObject, wanted: Record<string, string>) =>
  Object.entries(wanted).every(([key, value]) => run.metadata?.annotations?.[key] === value)
