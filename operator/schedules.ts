import { createHash } from "node:crypto"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import {
  derivedScheduleLabel,
  type PipelineObject,
  pipelineLabel,
  pipelineOwnerReference,
  runnelApiVersion,
  type ScheduleObject,
} from "../lib/kube/resources.ts"
import { parseYamlPipeline } from "../lib/yaml/parse.ts"

type Wanted = Pick<ScheduleObject["spec"], "jobName" | "type" | "expression" | "timeZone">

/**
 * The Schedules a YAML pipeline declares: one per job with
 * `triggers.schedule` (`cron`, or `every` as an interval), none for a script.
 * Content that does not validate declares none, and its Ready condition says why.
 */
export function declaredSchedules(pipeline: PipelineObject, contentType: string): Map<string, Wanted> {
  const wanted = new Map<string, Wanted>()
  if (contentType !== "yaml") return wanted
  let jobs: ReturnType<typeof parseYamlPipeline>["jobs"]
  try {
    jobs = parseYamlPipeline(pipeline.spec.content).jobs
  } catch {
    return wanted
  }
  const name = pipeline.metadata?.name ?? ""
  for (const job of jobs) {
    const schedule = job.triggers?.schedule
    if (schedule === undefined) continue
    wanted.set(
      scheduleName(name, job.name),
      "cron" in schedule
        ? {
            jobName: job.name,
            type: "cron",
            expression: schedule.cron,
            ...(schedule.timeZone === undefined ? {} : { timeZone: schedule.timeZone }),
          }
        : { jobName: job.name, type: "interval", expression: schedule.every },
    )
  }
  return wanted
}

/**
 * Makes the Pipeline's Schedules what its content declares: creates the
 * missing ones (owned by the Pipeline, so they go with it), updates the type
 * expression and time zone of the changed ones (keeping `enabled`, which
 * people set), and deletes those no job declares any more. Schedules applied
 * with kubectl (without the derived-from label) are never touched.
 */
export async function syncSchedules(
  client: Pick<ResourceClient, "listSchedules" | "createSchedule" | "patchScheduleSpec" | "deleteSchedule">,
  pipeline: PipelineObject,
  wanted: ReadonlyMap<string, Wanted>,
): Promise<void> {
  const pipelineName = pipeline.metadata?.name ?? ""
  const existing = new Map((await client.listSchedules(pipelineName)).map((s) => [s.metadata?.name ?? "", s]))
  for (const [name, spec] of wanted) {
    const current = existing.get(name)
    if (current === undefined) {
      await client.createSchedule({
        apiVersion: runnelApiVersion,
        kind: "Schedule",
        metadata: {
          name,
          labels: { [pipelineLabel]: pipelineName, [derivedScheduleLabel]: "yaml" },
          ownerReferences: [pipelineOwnerReference(pipeline)],
        },
        spec: { pipelineRef: { name: pipelineName }, ...spec, enabled: true },
      })
    } else if (
      current.spec.type !== spec.type ||
      current.spec.expression !== spec.expression ||
      (current.spec.timeZone ?? "") !== (spec.timeZone ?? "")
    ) {
      // null removes a time zone the YAML no longer gives (a merge patch leaves an absent field alone).
      const timeZone = (spec.timeZone ?? null) as string | undefined
      await client.patchScheduleSpec(name, { type: spec.type, expression: spec.expression, timeZone })
    }
  }
  for (const name of existing.keys()) if (!wanted.has(name)) await client.deleteSchedule(name)
}

/**
 * `<pipeline>-<job>` as a Kubernetes name: a job name may hold capitals,
 * `_` or spaces, and the whole may be too long, so such names are lowered,
 * cleaned and suffixed with a short hash of the job name to stay unique.
 */
export function scheduleName(pipeline: string, job: string): string {
  const plain = `${pipeline}-${job}`
  if (/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(plain) && plain.length <= 63) return plain
  const hash = createHash("sha256").update(job).digest("hex").slice(0, 8)
  const cleaned = job
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/^-+|-+$/g, "")
  return `${`${pipeline}-${cleaned}`.slice(0, 63 - 9).replace(/-+$/, "")}-${hash}`
}
