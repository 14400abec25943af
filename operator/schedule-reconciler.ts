import { errorMessage } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { Informer } from "../lib/kube/informer.ts"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import {
  type Condition,
  kubeTime,
  type PipelineObject,
  type ScheduleObject,
  scheduledRun,
  withCondition,
} from "../lib/kube/resources.ts"
import { type ScheduleTimes, scheduleTimesOf } from "../lib/schedule/schedule-times.ts"
import { type CronJobSettings, cronJobFor, cronJobName, firedByCronJob } from "./schedule-cronjob.ts"

/** How old the last missed tick may be and still fire after downtime, when the Schedule says nothing. */
export const defaultStartingDeadlineSeconds = 300

/** setTimeout's longest delay; a later tick is reached by arming again. */
const longestTimerMs = 2 ** 31 - 1

export type ScheduleReconcilerClient = Pick<
  ResourceClient,
  "createRunOnce" | "patchScheduleStatus" | "putCronJob" | "deleteCronJob"
>

/**
 * Fires Schedules with the operator's own timer: one timer per enabled
 * Schedule, armed for its next tick (no polling), and one Run per tick.
 *
 * Rules a reader can check (level-triggered, like the run reconciler):
 * - A pass over a Schedule reads only the Schedule, its Pipeline and the
 *   clock; events, timers and restarts all just ask for a pass.
 * - `status.nextRunAt` is the tick the Schedule is armed for. When a pass finds
 *   it due (or past: a restart, a slow pass), it fires the latest tick at or
 *   before now, once, if that tick is within the starting deadline (default
 *   300 s), and none otherwise; then it arms the first tick after now. So a
 *   downtime costs at most one catch-up run, never a burst (the Kubernetes
 *   CronJob model).
 * - The Run of a tick is named after the Schedule and the tick
 *   (scheduledRunName), and created before the status moves on: a crash in
 *   between, a second operator or a second pass creates the same name, which
 *   is a 409 and nothing more. Exactly one Run per tick.
 * - Disabled, paused pipeline or feature off: no timer, `nextRunAt` null, so
 *   re-enabling arms the next tick after now and fires nothing missed meanwhile.
 * - In cronjob mode a five-field cron Schedule is mirrored by a CronJob
 *   (schedule-cronjob.ts) that fires it; `suspend` follows the same idle
 *   reasons, and the timer only moves `lastRunAt` (the scheduled time, as a
 *   CronJob's lastScheduleTime) and `nextRunAt`. Intervals and seconds fields
 *   keep the timer in every mode.
 */
export class ScheduleReconciler {
  readonly #client: ScheduleReconcilerClient
  readonly #pipelines: { get(name: string): PipelineObject | undefined }
  readonly #firing: boolean
  readonly #log: Log
  readonly #now: () => number
  readonly #cronJobs: CronJobSettings | undefined
  readonly #pending = new Set<string>()
  /** The tick this process armed each Schedule for, with the generation it read; ahead of a lagging cache. */
  readonly #armed = new Map<string, { dueMs: number; generation: number; timer: NodeJS.Timeout | undefined }>()
  #informer: Informer<ScheduleObject> | undefined
  #working: Promise<void> | undefined
  #stopped = false

  constructor(options: {
    client: ScheduleReconcilerClient
    pipelines: { get(name: string): PipelineObject | undefined }
    /** The `schedules` feature: off, nothing fires and no timer is armed. */
    firing: boolean
    /** Cronjob mode: what the CronJobs run. Absent, the timer fires every Schedule. */
    cronJobs?: CronJobSettings
    log: Log
    now?: () => number
  }) {
    this.#cronJobs = options.cronJobs
    this.#client = options.client
    this.#pipelines = options.pipelines
    this.#firing = options.firing
    this.#log = options.log
    this.#now = options.now ?? Date.now
  }

  attach(informer: Informer<ScheduleObject>): void {
    this.#informer = informer
    for (const schedule of informer.list()) this.changed(schedule)
  }

  changed(schedule: ScheduleObject): void {
    const name = schedule.metadata?.name
    if (name !== undefined) this.#ask(name)
  }

  deleted(schedule: ScheduleObject): void {
    this.#disarm(schedule.metadata?.name ?? "")
  }

  /** A Pipeline changed (paused, unpaused, created): its Schedules are looked at again. */
  pipelineChanged(pipelineName: string): void {
    for (const schedule of this.#informer?.list() ?? []) {
      if (schedule.spec.pipelineRef.name === pipelineName) this.changed(schedule)
    }
  }

  /** Resolves when every pending Schedule has had its pass. */
  async idle(): Promise<void> {
    while (this.#working !== undefined) await this.#working
  }

  /** Disarms every timer; a pass under way finishes. */
  async stop(): Promise<void> {
    this.#stopped = true
    for (const name of [...this.#armed.keys()]) this.#disarm(name)
    while (this.#working !== undefined) await this.#working
  }

  #ask(name: string): void {
    if (this.#stopped) return
    this.#pending.add(name)
    this.#working ??= this.#work().finally(() => {
      this.#working = undefined
      if (this.#pending.size > 0) this.#ask([...this.#pending][0] as string)
    })
  }

  async #work(): Promise<void> {
    for (const name of this.#pending) {
      this.#pending.delete(name)
      if (this.#stopped) return
      try {
        await this.#reconcile(name)
      } catch (error) {
        this.#log("schedule.reconcile-failed", { schedule: name, error: errorMessage(error) })
        // Try again shortly: a tick must not be lost to one failed call.
        this.#arm(name, this.#now() + 1000, this.#armed.get(name)?.generation ?? -1)
      }
    }
  }

  async #reconcile(name: string): Promise<void> {
    const schedule = this.#informer?.get(name)
    if (schedule === undefined) {
      this.#disarm(name)
      return
    }
    const generation = schedule.metadata?.generation ?? 0
    const pipeline = this.#pipelines.get(schedule.spec.pipelineRef.name)
    let times: ScheduleTimes
    try {
      times = scheduleTimesOf(schedule)
    } catch (error) {
      this.#disarm(name)
      if (this.#cronJobs !== undefined) await this.#client.deleteCronJob(cronJobName(name))
      await this.#write(
        schedule,
        { nextRunAt: null },
        { status: "False", reason: "InvalidExpression", message: errorMessage(error) },
      )
      return
    }
    const mirrored = this.#cronJobs !== undefined && firedByCronJob(schedule)
    const deadlineSeconds = schedule.spec.startingDeadlineSeconds ?? defaultStartingDeadlineSeconds
    const mirror = async (suspend: boolean) => {
      if (this.#cronJobs === undefined) return
      if (mirrored) {
        const cronJob = cronJobFor(schedule, this.#cronJobs, { suspend, startingDeadlineSeconds: deadlineSeconds })
        await this.#client.putCronJob(cronJob)
      } else if (schedule.status?.observedGeneration !== generation) {
        // A schedule that a CronJob cannot fire (any more): the timer has it, and no CronJob may fire it too.
        await this.#client.deleteCronJob(cronJobName(name))
      }
    }
    if (pipeline === undefined) {
      this.#disarm(name)
      await mirror(true)
      const message = `pipeline "${schedule.spec.pipelineRef.name}" does not exist`
      await this.#write(schedule, { nextRunAt: null }, { status: "False", reason: "PipelineNotFound", message })
      return
    }
    const idle = !this.#firing
      ? { reason: "FeatureDisabled", message: "the schedules feature is off (--allowed-features)" }
      : schedule.spec.enabled === false
        ? { reason: "Disabled", message: "the schedule is disabled" }
        : pipeline.spec.paused === true
          ? { reason: "PipelinePaused", message: `pipeline "${pipeline.metadata?.name}" is paused` }
          : undefined
    if (idle !== undefined) {
      this.#disarm(name)
      await mirror(true)
      await this.#write(schedule, { nextRunAt: null }, { status: "True", ...idle })
      return
    }

    await mirror(false)
    const now = this.#now()
    const armed = this.#armed.get(name)
    const status = schedule.status ?? {}
    const recorded =
      status.observedGeneration === generation && typeof status.nextRunAt === "string"
        ? Date.parse(status.nextRunAt)
        : undefined
    const committed = armed?.generation === generation ? Math.max(armed.dueMs, recorded ?? 0) : recorded
    let due = committed ?? times.next(now)
    let lastRunAt = status.lastRunAt ?? null
    if (due <= now) {
      const tick = times.latest(now)
      const deadlineMs = deadlineSeconds * 1000
      if (mirrored && tick !== undefined) {
        lastRunAt = iso(tick) // its CronJob fires it; this is the scheduled time, as lastScheduleTime is
      } else if (tick !== undefined && tick >= due && now - tick <= deadlineMs) {
        const created = await this.#client.createRunOnce(scheduledRun(schedule, pipeline, tick, this.#now()))
        const lateMs = this.#now() - tick
        this.#log(created ? "schedule.fired" : "schedule.already-fired", { schedule: name, dueAt: iso(tick), lateMs })
        lastRunAt = iso(tick)
      } else {
        this.#log("schedule.missed", {
          schedule: name,
          dueAt: iso(due),
          latestTick: tick === undefined ? null : iso(tick),
        })
      }
      due = times.next(Math.max(now, tick ?? now))
    }
    this.#arm(name, due, generation)
    await this.#write(
      schedule,
      { lastRunAt, nextRunAt: iso(due) },
      { status: "True", reason: "Armed", message: `next run at ${iso(due)}` },
    )
  }

  #arm(name: string, dueMs: number, generation: number): void {
    const current = this.#armed.get(name)
    if (current !== undefined) {
      if (current.dueMs === dueMs && current.generation === generation && current.timer !== undefined) return
      clearTimeout(current.timer)
    }
    if (this.#stopped) return
    // The timer's clock and Date.now() may differ by a millisecond: a timer that fires just before
    // the due time finds the tick not yet due, and this arms it again for the rest.
    const delayMs = Math.min(Math.max(dueMs - this.#now(), 1), longestTimerMs)
    const entry: { dueMs: number; generation: number; timer: NodeJS.Timeout | undefined } = {
      dueMs,
      generation,
      timer: undefined,
    }
    entry.timer = setTimeout(() => {
      entry.timer = undefined
      this.#ask(name)
    }, delayMs)
    this.#armed.set(name, entry)
  }

  #disarm(name: string): void {
    const current = this.#armed.get(name)
    if (current === undefined) return
    clearTimeout(current.timer)
    this.#armed.delete(name)
  }

  /** Writes the status when it differs from what the Schedule shows: replays of the same events write nothing. */
  async #write(
    schedule: ScheduleObject,
    times: { lastRunAt?: string | null; nextRunAt: string | null },
    ready: Pick<Condition, "status" | "reason" | "message">,
  ): Promise<void> {
    const name = schedule.metadata?.name ?? ""
    const generation = schedule.metadata?.generation ?? 0
    const status = schedule.status ?? {}
    const current = status.conditions?.find((condition) => condition.type === "Ready")
    const lastRunAt = times.lastRunAt === undefined ? (status.lastRunAt ?? null) : times.lastRunAt
    const same =
      (status.nextRunAt ?? null) === times.nextRunAt &&
      (status.lastRunAt ?? null) === lastRunAt &&
      status.observedGeneration === generation &&
      current?.status === ready.status &&
      current.reason === ready.reason &&
      current.message === ready.message
    if (same) return
    const conditions = withCondition(status.conditions, {
      type: "Ready",
      ...ready,
      lastTransitionTime: kubeTime(),
      observedGeneration: generation,
    })
    await this.#client.patchScheduleStatus(name, {
      lastRunAt,
      nextRunAt: times.nextRunAt,
      observedGeneration: generation,
      conditions,
    })
  }
}

const iso = (ms: number) => new Date(ms).toISOString()
