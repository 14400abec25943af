import { badRequest } from "../core/errors.ts"
import { type CommandLine, deepFreeze, type FlagSpec, hostEnvironment, readFlags } from "./flags.ts"
import { type KubeSource, kubeSource } from "./kubeconfig.ts"

/** The flags of `runnel schedule fire`, which a Schedule's CronJob runs in a cluster. */
export const scheduleFireFlags: readonly FlagSpec[] = [
  {
    name: "kubeconfig",
    value: "FILE",
    description: "kubeconfig of the Kubernetes API; without it $KUBECONFIG or ~/.kube/config, or in a Pod its account",
  },
  { name: "due", value: "TIME", description: "the tick to fire, RFC 3339 (2026-01-01T09:00:00Z)" },
  {
    name: "job-name",
    value: "NAME",
    description:
      "instead of --due: the name of the CronJob's Job, <cronjob>-<scheduled minute since the epoch>, which says the tick",
  },
]

/** `runnel schedule fire NAMESPACE/SCHEDULE`: which Schedule, which tick, and where the API is. */
export type ScheduleFireSettings = {
  readonly kube: KubeSource
  readonly namespace: string
  readonly schedule: string
  readonly dueMs: number
}

/** The settings from the command line and environment, checked and frozen: a bad value is a 400 naming its flag. */
export function scheduleFireSettings(
  target: string,
  cli: CommandLine,
  env: NodeJS.ProcessEnv = process.env,
): ScheduleFireSettings {
  const flags = readFlags(scheduleFireFlags, cli, env)
  const [namespace = "", schedule = "", ...rest] = target.split("/")
  if (namespace === "" || schedule === "" || rest.length > 0) {
    throw badRequest(`"${target}" is not NAMESPACE/SCHEDULE, for example default/nightly-build`)
  }
  const due = flags.due === undefined ? undefined : String(flags.due)
  const jobName = flags["job-name"] === undefined ? undefined : String(flags["job-name"])
  if ((due === undefined) === (jobName === undefined)) throw badRequest("give the tick with either --due or --job-name")
  let dueMs: number
  if (due !== undefined) {
    dueMs = Date.parse(due)
    if (!/^\d{4}-\d\d-\d\dT/.test(due) || Number.isNaN(dueMs)) {
      throw badRequest(`--due "${due}" is not an RFC 3339 time such as 2026-01-01T09:00:00Z`)
    }
  } else {
    const minutes = /-(\d+)$/.exec(jobName ?? "")?.[1]
    if (minutes === undefined) {
      throw badRequest(`--job-name "${jobName}" does not end in -<minutes since the epoch>, as a CronJob's Jobs do`)
    }
    dueMs = Number(minutes) * 60_000
  }
  const flag = flags.kubeconfig === undefined ? undefined : String(flags.kubeconfig)
  return deepFreeze({
    kube: kubeSource("schedule fire", flag, hostEnvironment(env)),
    namespace,
    schedule,
    dueMs,
  })
}
