import { afterEach, describe, expect, it } from "vitest"
import { quietLog } from "../lib/core/log.ts"
import type { Informer } from "../lib/kube/informer.ts"
import type { PipelineObject, RunObject, ScheduleObject } from "../lib/kube/resources.ts"
import { ScheduleReconciler } from "./schedule-reconciler.ts"

// The missed-tick policy with a clock the test sets: what a restarted operator does after downtime.
// The real timer, informers and API are in test/schedules.test.ts.

const t0 = Date.parse("2026-01-01T00:00:00Z")
const minute = 60_000
const iso = (ms: number) => new Date(ms).toISOString()

const pipeline: PipelineObject = { metadata: { name: "p", uid: "uid-p" }, spec: { content: "" } }

function setUp(status: ScheduleObject["status"], nowMs: number, expression = "1m") {
  const schedule: ScheduleObject = {
    metadata: { name: "p-job", uid: "uid-s", generation: 1, creationTimestamp: iso(t0) as unknown as Date },
    spec: { pipelineRef: { name: "p" }, jobName: "job", type: "interval", expression, enabled: true },
    status,
  }
  const created: string[] = []
  const informer: Informer<ScheduleObject> = {
    list: () => [schedule],
    get: (name) => (name === "p-job" ? schedule : undefined),
    stop: async () => {},
  }
  const client = {
    async createRunOnce(run: RunObject) {
      const name = run.metadata?.name ?? ""
      if (created.includes(name)) return false
      created.push(name)
      return true
    },
    async patchScheduleStatus(_name: string, next: NonNullable<ScheduleObject["status"]>) {
      schedule.status = next
      return schedule
    },
    putCronJob: async () => {},
    deleteCronJob: async () => true,
  }
  const reconciler = new ScheduleReconciler({
    client,
    pipelines: { get: (name) => (name === "p" ? pipeline : undefined) },
    firing: true,
    log: quietLog,
    now: () => nowMs,
  })
  reconcilers.push(reconciler)
  return { reconciler, informer, created, schedule }
}

const reconcilers: ScheduleReconciler[] = []
afterEach(async () => {
  for (const reconciler of reconcilers.splice(0)) await reconciler.stop()
})

describe("a schedule after downtime", () => {
  it("fires only the latest missed tick, once, when it is within the starting deadline", async () => {
    // Armed for 00:01, back at 00:05:30: ticks 00:01 to 00:05 were missed; 00:05 is 30 s old.
    const { reconciler, informer, created, schedule } = setUp(
      { nextRunAt: iso(t0 + minute), observedGeneration: 1 },
      t0 + 5.5 * minute,
    )
    reconciler.attach(informer)
    await reconciler.idle()
    expect(created).toEqual([`p-job-${(t0 + 5 * minute) / 1000}`])
    expect(schedule.status).toMatchObject({ lastRunAt: iso(t0 + 5 * minute), nextRunAt: iso(t0 + 6 * minute) })
    // Another pass at the same instant (an event, a second operator) creates nothing more.
    reconciler.changed(schedule)
    await reconciler.idle()
    expect(created).toHaveLength(1)
  })

  it("fires nothing when the latest missed tick is older than the starting deadline", async () => {
    // Hourly, armed for 01:00, back at 02:30: the latest missed tick, 02:00, is 30 minutes old.
    const { reconciler, informer, created, schedule } = setUp(
      { nextRunAt: iso(t0 + 60 * minute), observedGeneration: 1 },
      t0 + 150 * minute,
      "1h",
    )
    reconciler.attach(informer)
    await reconciler.idle()
    expect(created).toEqual([])
    expect(schedule.status).toMatchObject({ nextRunAt: iso(t0 + 180 * minute) })
    expect(schedule.status?.lastRunAt ?? null).toBeNull()
  })

  it("fires nothing missed while it had no next run (disabled or paused), and arms the next tick", async () => {
    const { reconciler, informer, created, schedule } = setUp(
      { nextRunAt: null, observedGeneration: 1 },
      t0 + 5.5 * minute,
    )
    reconciler.attach(informer)
    await reconciler.idle()
    expect(created).toEqual([])
    expect(schedule.status).toMatchObject({ nextRunAt: iso(t0 + 6 * minute) })
  })
})
