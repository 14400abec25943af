import { homedir } from "node:os"
import { parseDuration } from "../core/duration.ts"
import { badRequest, errorMessage } from "../core/errors.ts"

/**
 * One table of flags: the CLI builds its options and --help from it, and
 * readFlags() resolves each value from the command line, then its CI_*
 * variable, then the default. A flag beats its variable.
 */
export type FlagSpec = {
  /** Long name without dashes, for example "pipeline-timeout". */
  readonly name: string
  /** One-letter alias without the dash, for example "s" for `-s`. */
  readonly short?: string
  /** Another long name, with its own CI_* variable (contract.md's neutral spellings); the name wins. */
  readonly alias?: string
  readonly description: string
  /** Placeholder in --help, for example "DURATION"; absent for booleans. */
  readonly value?: string
  readonly defaultValue?: string
  readonly repeatable?: boolean
}

export function envName(flag: FlagSpec): string {
  return `CI_${flag.name.toUpperCase().replaceAll("-", "_")}`
}

export function optionName(flag: FlagSpec): string {
  return flag.name.replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase())
}

/** The options commander parsed; readFlags() adds each flag's CI_* variable and default. */
export type CommandLine = Readonly<Record<string, unknown>>

export type FlagValues = Readonly<Record<string, string | readonly string[] | undefined>>

/**
 * Resolves every flag of `table`. Repeatable flags from the environment are
 * comma-separated. The result is frozen: components get slices, never the
 * environment.
 */
export function readFlags(
  table: readonly FlagSpec[],
  cli: CommandLine,
  env: NodeJS.ProcessEnv = process.env,
): FlagValues {
  const values: Record<string, string | readonly string[] | undefined> = {}
  for (const flag of table) {
    const alias = flag.alias === undefined ? undefined : { ...flag, name: flag.alias }
    const given = cli[optionName(flag)] ?? (alias === undefined ? undefined : cli[optionName(alias)])
    const fromEnv = env[envName(flag)] ?? (alias === undefined ? undefined : env[envName(alias)])
    if (flag.repeatable) {
      const list = Array.isArray(given) && given.length > 0 ? given : fromEnv ? fromEnv.split(",") : []
      values[flag.name] = Object.freeze(list.map(String))
    } else {
      // A switch (a flag without a value) given on the command line is `true` there.
      values[flag.name] = typeof given === "string" ? given : given === true ? "true" : (fromEnv ?? flag.defaultValue)
    }
  }
  return Object.freeze(values)
}

/** `K=V` pairs into a map; the key is an environment-variable-like name. */
export function parseKeyValues(pairs: readonly string[], flag: string): Record<string, string> {
  const result: Record<string, string> = {}
  for (const pair of pairs) {
    const at = pair.indexOf("=")
    const key = at === -1 ? "" : pair.slice(0, at)
    if (!/^[A-Za-z_][A-Za-z0-9_.-]*$/.test(key)) {
      throw badRequest(`--${flag} "${pair.split("=")[0]}=…" is not KEY=VALUE; write it as --${flag} API_TOKEN=value`)
    }
    result[key] = pair.slice(at + 1)
  }
  return result
}

/** A switch: given (or its variable `true` or `1`) is on; its variable `false`, `0` or unset is off. */
export function parseSwitch(text: string | undefined, flag: string): boolean {
  if (text === undefined || text === "" || text === "false" || text === "0") return false
  if (text === "true" || text === "1") return true
  throw badRequest(
    `--${flag} is a switch; its variable ${envName({ name: flag, description: "" })} is true, 1, false or 0, not "${text}"`,
  )
}

/** A Go-style duration flag (`5s`, `1m30s`) in milliseconds; a bad one is a 400 naming the flag. */
export function parseDurationFlag(text: string | undefined, flag: string): number {
  try {
    return parseDuration(String(text))
  } catch (error) {
    throw badRequest(`--${flag}: ${errorMessage(error)}`)
  }
}

export function parsePositiveInt(text: string | undefined, flag: string): number {
  const value = Number(text)
  if (!Number.isInteger(value) || value <= 0)
    throw badRequest(`--${flag} must be a positive whole number, not "${text}"`)
  return value
}

/** 0, 1, 2…: digits only, so "", "1e3" and "-1" are refused. */
export function parseWholeNumber(text: string | undefined, flag: string): number {
  const value = Number(text)
  if (!/^[0-9]+$/.test(String(text)) || !Number.isSafeInteger(value))
    throw badRequest(`--${flag} must be a whole number (0 or more), not "${text}"`)
  return value
}

/** The parts of the process environment runnel uses besides its CI_* flags. */
export type HostEnvironment = {
  readonly dockerHost: string | undefined
  readonly path: string
  /** Set in every Pod: the roles then use the Pod's service account unless a kubeconfig is named. */
  readonly inCluster: boolean
  /** `KUBECONFIG`, as kubectl reads it: a list of files joined by ":". */
  readonly kubeconfig: string | undefined
  /** Where `~/.kube/config` is looked for. */
  readonly home: string
}

export function hostEnvironment(env: NodeJS.ProcessEnv = process.env): HostEnvironment {
  return Object.freeze({
    dockerHost: env.DOCKER_HOST,
    path: env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
    inCluster: env.KUBERNETES_SERVICE_HOST !== undefined && env.KUBERNETES_SERVICE_HOST !== "",
    kubeconfig: env.KUBECONFIG,
    home: env.HOME ?? homedir(),
  })
}

/** Freezes settings all the way down, so a component handed one slice cannot change what another reads. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    for (const item of Object.values(value)) deepFreeze(item)
    Object.freeze(value)
  }
  return value
}
