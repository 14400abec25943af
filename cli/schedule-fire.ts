import type { ScheduleFireSettings } from "../lib/config/schedule-fire.ts"
import { notFound, RunnelError } from "../lib/core/errors.ts"
import { ResourceClient } from "../lib/kube/resource-client.ts"
import { scheduledRun, scheduledRunName } from "../lib/kube/resources.ts"
import { scheduleTimesOf } from "../lib/schedule/schedule-times.ts"
import { loadKubeConfig } from "./kubeconfig.ts"

/**
 * `runnel schedule fire NAMESPACE/SCHEDULE --due TIME`: creates the Run of one
 * tick, named as the operator's timer names it, so that running it again (a
 * retried Job, a timer that got there first) creates nothing more. It reads
 * the Schedule and its Pipeline and creates a Run: nothing else, which is all
 * the CronJob's ServiceAccount may do.
 */
export async function fireSchedule(settings: ScheduleFireSettings): Promise<void> {
  const client = new ResourceClient(loadKubeConfig(settings.kube), settings.namespace)
  const schedule = await client.getSchedule(settings.schedule)
  if (schedule === undefined) throw notFound("schedule", `${settings.namespace}/${settings.schedule}`)
  const times = scheduleTimesOf(schedule)
  const due = new Date(settings.dueMs).toISOString()
  if (times.latest(settings.dueMs) !== settings.dueMs) {
    throw new RunnelError(
      400,
      "not_a_tick",
      `${due} is not a due time of schedule "${settings.schedule}" (${schedule.spec.expression})`,
    )
  }
  const name = scheduledRunName(settings.schedule, settings.dueMs)
  const pipeline = await client.getPipeline(schedule.spec.pipelineRef.name)
  if (pipeline === undefined) throw notFound("pipeline", schedule.spec.pipelineRef.name)
  if (schedule.spec.enabled === false || pipeline.spec.paused === true) {
    process.stdout.write(
      `schedule "${settings.schedule}" is ${schedule.spec.enabled === false ? "disabled" : "of a paused pipeline"}; nothing fired for ${due}\n`,
    )
    return
  }
  const created = await client.createRunOnce(scheduledRun(schedule, pipeline, settings.dueMs, Date.now()))
  process.stdout.write(created ? `run "${name}" created for ${due}\n` : `run "${name}" already exists for ${due}\n`)
}
