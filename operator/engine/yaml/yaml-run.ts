import type { EngineDeps, RunIdentity } from "../engine.ts"
import type { ResourceVersions } from "./versions.ts"

export type { MetadataField, ResourceVersions, Version } from "./versions.ts"

/** Everything a YAML run needs to know about itself. */
export type YamlRun = RunIdentity & {
  /** Run only these jobs (a Schedule's); all when absent. `passed:` on a job left out is not waited for. */
  readonly jobs?: readonly string[]
}

/** The limits of a job that hold across runs (Concourse `serial`, `serial_groups`, `max_in_flight`). */
export type JobLimit = {
  readonly serial: boolean
  readonly serialGroups: readonly string[]
  readonly maxInFlight?: number
}

export type YamlDeps = EngineDeps & {
  /** The image of a mock resource's `mirror_self` and of runnel's own small tasks (writing files, reading them): `--mock-image`. */
  readonly mockImage: string
  /** The pipeline's resource versions, kept between runs. */
  readonly versions: ResourceVersions
  /** Stores a pipeline (set_pipeline); undefined in `runnel runner`, where set_pipeline is an error. */
  readonly setPipeline?: (name: string, yaml: string) => Promise<void>
  /**
   * Waits until a run of this pipeline may start under its top-level `max_in_flight` (rejecting when
   * `signal` aborts first); resolves with the release. Undefined: no limit.
   */
  readonly runSlot?: (limit: number, signal: AbortSignal) => Promise<() => void>
  /**
   * Waits until the job may start under its limits across runs (rejecting when `signal` aborts first,
   * having given back what it took); resolves with the release. Undefined: no limit.
   */
  readonly jobSlot?: (job: string, limit: JobLimit, signal: AbortSignal) => Promise<() => void>
}
