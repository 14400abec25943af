import { parseDuration } from "../core/duration.ts"
import { defaultFeatures } from "./features.ts"
import {
  type CommandLine,
  deepFreeze,
  type FlagSpec,
  type HostEnvironment,
  hostEnvironment,
  parseKeyValues,
  parsePositiveInt,
  parseSwitch,
  readFlags,
} from "./flags.ts"
import {
  allowPrivilegedTasksFlag,
  checkDriverName,
  mockImageFlag,
  type NetworkSettings,
  networkFlags,
  networkPart,
} from "./operator.ts"

export const runnerFlags: readonly FlagSpec[] = [
  { name: "driver", value: "NAME", defaultValue: "docker", description: "runs the tasks: docker or native" },
  {
    name: "secret",
    value: "KEY=VALUE",
    repeatable: true,
    description: "a secret for `secret:KEY` env values (repeatable)",
  },
  {
    name: "storage-sqlite-path",
    value: "PATH",
    description:
      "SQLite file that keeps the run's task records and output; without it, a temporary file removed at the end",
  },
  { name: "pipeline-memory-mb", value: "MB", defaultValue: "128", description: "memory limit of the script's sandbox" },
  { name: "pipeline-timeout", value: "DURATION", defaultValue: "1h", description: "wall-clock limit of the whole run" },
  mockImageFlag,
  ...networkFlags,
  allowPrivilegedTasksFlag,
]

/** `runnel runner`: one pipeline file on this machine, without a server. */
export type RunnerSettings = {
  readonly driver: string
  readonly secrets: Readonly<Record<string, string>>
  /** Where the run's records go; undefined: a temporary file removed at the end. */
  readonly storagePath: string | undefined
  readonly limits: { readonly memoryMb: number; readonly timeoutMs: number }
  readonly mockImage: string
  /** fetch(), notifications and native git: both features on (the runner has no --allowed-features). */
  readonly network: NetworkSettings
  /** The environment the drivers read: the Docker host, the PATH of native tasks. */
  readonly host: HostEnvironment
  /** `--allow-privileged-tasks`: without it a task asking for `privileged` ends in error. */
  readonly allowPrivilegedTasks: boolean
}

/** `runnel runner`'s settings from its command line and environment, checked and frozen. */
export function runnerSettings(
  cli: CommandLine,
  driverNames: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): RunnerSettings {
  const flags = readFlags(runnerFlags, cli, env)
  const driver = String(flags.driver)
  checkDriverName(driver, driverNames)
  return deepFreeze({
    driver,
    secrets: parseKeyValues((flags.secret as string[] | undefined) ?? [], "secret"),
    storagePath: flags["storage-sqlite-path"] === undefined ? undefined : String(flags["storage-sqlite-path"]),
    limits: {
      memoryMb: parsePositiveInt(flags["pipeline-memory-mb"] as string, "pipeline-memory-mb"),
      timeoutMs: parseDuration(String(flags["pipeline-timeout"])),
    },
    mockImage: String(flags["mock-image"]),
    network: networkPart(flags, defaultFeatures),
    host: hostEnvironment(env),
    allowPrivilegedTasks: parseSwitch(flags["allow-privileged-tasks"] as string | undefined, "allow-privileged-tasks"),
  })
}
