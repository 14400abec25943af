import { createHash } from "node:crypto"
import type { V1CronJob } from "../lib/kube/client-node.js"
import { ownerReference, type ScheduleObject, scheduleLabel } from "../lib/kube/resources.ts"
import { cronParts } from "../lib/schedule/schedule-times.ts"

/** What a Schedule's CronJob runs: runnel's own image, under an account that may only create Runs and read Schedules. */
export type CronJobSettings = { readonly image: string; readonly serviceAccount: string; readonly namespace: string }

/**
 * Whether a Kubernetes CronJob can fire this schedule: a cron expression of
 * five fields or a shorthand. Intervals and seconds fields stay on the
 * operator's timer in every mode.
 */
export function firedByCronJob(schedule: ScheduleObject): boolean {
  if (schedule.spec.type !== "cron") return false
  const { fields } = cronParts(schedule.spec.expression, schedule.spec.timeZone)
  return fields.startsWith("@") || fields.split(/\s+/).length === 5
}

/** A CronJob's name: the Schedule's, within the 52 characters Kubernetes allows a CronJob (its Jobs add a suffix). */
export function cronJobName(schedule: string): string {
  if (schedule.length <= 52) return schedule
  const hash = createHash("sha256").update(schedule).digest("hex").slice(0, 8)
  return `${schedule.slice(0, 43).replace(/-+$/, "")}-${hash}`
}

/**
 * The CronJob that mirrors a Schedule, owned by it (deleted with it). Its Job
 * runs `runnel schedule fire NAMESPACE/SCHEDULE --job-name <the Job's name>`:
 * the CronJob controller names each Job `<cronjob>-<scheduled minute>`, so the
 * due time is the Job's own name and a retried Job creates the same Run name.
 */
export function cronJobFor(
  schedule: ScheduleObject,
  settings: CronJobSettings,
  options: { suspend: boolean; startingDeadlineSeconds: number },
): V1CronJob {
  const name = schedule.metadata?.name ?? ""
  const { fields, timeZone } = cronParts(schedule.spec.expression, schedule.spec.timeZone)
  return {
    apiVersion: "batch/v1",
    kind: "CronJob",
    metadata: {
      name: cronJobName(name),
      labels: { [scheduleLabel]: name, "app.kubernetes.io/part-of": "runnel" },
      ownerReferences: [{ ...ownerReference("Schedule", schedule), controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      schedule: fields,
      timeZone,
      suspend: options.suspend,
      // Two Runs of one pipeline may overlap, as with the timer; the run queue admits them.
      concurrencyPolicy: "Allow",
      startingDeadlineSeconds: options.startingDeadlineSeconds,
      successfulJobsHistoryLimit: 3,
      failedJobsHistoryLimit: 1,
      jobTemplate: {
        spec: {
          backoffLimit: 3,
          template: {
            spec: {
              serviceAccountName: settings.serviceAccount,
              restartPolicy: "OnFailure",
              containers: [
                {
                  name: "fire",
                  image: settings.image,
                  args: ["schedule", "fire", `${settings.namespace}/${name}`, "--job-name", "$(JOB_NAME)"],
                  env: [
                    {
                      name: "JOB_NAME",
                      valueFrom: { fieldRef: { fieldPath: "metadata.labels['batch.kubernetes.io/job-name']" } },
                    },
                  ],
                },
              ],
            },
          },
        },
      },
    },
  }
}
