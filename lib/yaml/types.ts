/**
 * A Concourse-compatible YAML pipeline after validation. Keys are camelCase
 * versions of the YAML's (`max_in_flight` is `maxInFlight`); free-form values
 * the pipeline author owns (params, source, vars) keep their keys as written.
 *
 * Strings may still hold variables, `((name))`, `((.:name))` or
 * `((source:name))`: they are resolved when the run needs them, and an
 * undefined one fails the run, not the store. Durations are Go-style strings
 * (`90s`, `1h30m`), already checked with lib/core/duration.ts unless they hold
 * a variable; parse them with `parseDuration` after interpolation.
 */

/** Any value read from YAML (timestamps and other exotic tags stay strings, as in Concourse). */
export type YamlValue = string | number | boolean | null | readonly YamlValue[] | { readonly [key: string]: YamlValue }
export type YamlMap = { readonly [key: string]: YamlValue }

/** Where a job, resource or step was written, for messages at run time. */
export type SourceAt = { readonly path: string; readonly line: number }

export type YamlPipeline = {
  readonly jobs: readonly Job[]
  readonly resources: readonly Resource[]
  readonly resourceTypes: readonly ResourceType[]
  /** Accepted for Concourse compatibility; runnel does not use groups. */
  readonly groups: readonly Group[]
  readonly varSources: readonly VarSource[]
  /** runnel's own: how many runs of this pipeline may run at once. */
  readonly maxInFlight?: number
  /** Accepted for Concourse compatibility (its UI background); runnel ignores it. */
  readonly display?: YamlMap
  /** What the store answers besides "ok": the top-level keys it ignored, each with its line. */
  readonly notes: readonly string[]
}

export type Resource = {
  readonly at: SourceAt
  readonly name: string
  readonly type: string
  readonly source: YamlMap
  readonly icon?: string
  /** Pinned version. */
  readonly version?: Readonly<Record<string, string>>
  /** A duration, or `never`. */
  readonly checkEvery?: string
  readonly checkTimeout?: string
  readonly tags: readonly string[]
  readonly public: boolean
  readonly webhookToken?: string
  readonly oldName?: string
  readonly exposeBuildCreatedBy: boolean
}

export type ResourceType = {
  readonly at: SourceAt
  readonly name: string
  readonly type: string
  readonly source: YamlMap
  readonly privileged: boolean
  readonly params: YamlMap
  readonly checkEvery?: string
  readonly tags: readonly string[]
  readonly defaults: YamlMap
  readonly uniqueVersionHistory: boolean
}

export type Group = { readonly name: string; readonly jobs: readonly string[]; readonly resources: readonly string[] }

/** runnel supports the `dummy` var source: variables given inline in the pipeline. */
export type VarSource = { readonly name: string; readonly type: "dummy"; readonly vars: YamlMap }

export type Hooks = {
  readonly onSuccess?: Step
  readonly onFailure?: Step
  readonly onError?: Step
  readonly onAbort?: Step
  readonly ensure?: Step
}

/** `timeZone`: an IANA name for the cron expression; UTC when absent (or a `CRON_TZ=` prefix). */
export type Schedule = { readonly cron: string; readonly timeZone?: string } | { readonly every: string }

export type Job = Hooks & {
  readonly at: SourceAt
  readonly name: string
  readonly plan: readonly Step[]
  readonly serial: boolean
  readonly serialGroups: readonly string[]
  readonly maxInFlight?: number
  /** A CEL boolean expression against the webhook (checked elsewhere); false skips the job. */
  readonly webhookTrigger?: string
  readonly triggers?: { readonly schedule?: Schedule }
  readonly public: boolean
  readonly disableManualTrigger: boolean
  readonly interruptible: boolean
  readonly oldName?: string
  readonly buildLogRetention?: {
    readonly builds?: number
    readonly days?: number
    readonly minimumSucceededBuilds?: number
  }
}

export type AcrossVar = {
  readonly var: string
  /** The values, or a `((var))` that holds the list. */
  readonly values: readonly YamlValue[] | string
  /** How many values run at once: a positive integer or "all"; 1 when absent. */
  readonly maxInFlight?: number | "all"
  readonly failFast: boolean
}

/** Modifiers and hooks every step may carry. */
export type StepCommon = Hooks & {
  readonly at: SourceAt
  readonly timeout?: string
  readonly attempts?: number
  /** Worker tags: accepted for Concourse compatibility, ignored. */
  readonly tags: readonly string[]
  /** Run the step once for each combination of these variables' values, as `((.:var))`. */
  readonly across?: readonly AcrossVar[]
}

export type ContainerLimits = { readonly cpu?: number; readonly memoryBytes?: number }

export type TaskStep = StepCommon & {
  readonly kind: "task"
  readonly name: string
  readonly config?: TaskConfig
  /** `artifact/path/to/task.yml`, read and validated at run time. */
  readonly file?: string
  /** An artifact that holds the image to run in, instead of the config's image_resource. */
  readonly image?: string
  readonly privileged: boolean
  /** Merged over the config's params; nested values are passed as JSON. */
  readonly params: YamlMap
  /** Variables for a task `file`. */
  readonly vars: YamlMap
  readonly inputMapping: Readonly<Record<string, string>>
  readonly outputMapping: Readonly<Record<string, string>>
  readonly containerLimits?: ContainerLimits
  readonly hermetic: boolean
}

export type GetStep = StepCommon & {
  readonly kind: "get"
  /** The artifact's name. */
  readonly name: string
  /** The resource fetched; the step name when not given. */
  readonly resource: string
  readonly passed: readonly string[]
  readonly trigger: boolean
  readonly params: YamlMap
  readonly version?: "latest" | "every" | Readonly<Record<string, string>>
}

export type PutStep = StepCommon & {
  readonly kind: "put"
  readonly name: string
  readonly resource: string
  readonly params: YamlMap
  /** Artifacts given to the put: all of them when absent. */
  readonly inputs?: "all" | "detect" | readonly string[]
  readonly getParams: YamlMap
  readonly noGet: boolean
}

export type LoadVarStep = StepCommon & {
  readonly kind: "load_var"
  readonly name: string
  readonly file: string
  /** How to read the file; from its extension when absent (json, yaml/yml, else trim). */
  readonly format?: "json" | "yaml" | "yml" | "trim" | "raw"
  readonly reveal: boolean
}

export type SetPipelineStep = StepCommon & {
  readonly kind: "set_pipeline"
  /** A pipeline name, or `self` for the pipeline running the step. */
  readonly name: string
  readonly file: string
  readonly vars: YamlMap
  readonly varFiles: readonly string[]
}

/** An approval gate: the job waits until a person approves (success) or rejects it, or its timeout passes (failure). */
export type GateStep = StepCommon & {
  readonly kind: "gate"
  readonly name: string
  readonly message?: string
  /** A CEL expression over the user that an approver must satisfy. */
  readonly approvers?: string
}

export type DoStep = StepCommon & { readonly kind: "do"; readonly steps: readonly Step[] }
export type TryStep = StepCommon & { readonly kind: "try"; readonly step: Step }
export type InParallelStep = StepCommon & {
  readonly kind: "in_parallel"
  readonly steps: readonly Step[]
  /** At most this many steps at once; all at once when absent. */
  readonly limit?: number
  readonly failFast: boolean
}

export type Step =
  | TaskStep
  | GetStep
  | PutStep
  | LoadVarStep
  | SetPipelineStep
  | GateStep
  | DoStep
  | TryStep
  | InParallelStep
export type StepKind = Step["kind"]

export type ImageResource = {
  /** `registry-image`, `docker-image`, `mock`, or the name of one of the pipeline's resource_types. */
  readonly type: string
  /** registry-image and docker-image: `repository` (required) and `tag`; mock: `mirror_self`. */
  readonly source: YamlMap
  readonly params: YamlMap
  readonly version?: Readonly<Record<string, string>>
}

export type TaskInput = { readonly name: string; readonly path?: string; readonly optional: boolean }
export type TaskOutput = { readonly name: string; readonly path?: string }

export type TaskConfig = {
  readonly platform: string
  readonly imageResource?: ImageResource
  readonly rootfsUri?: string
  readonly inputs: readonly TaskInput[]
  readonly outputs: readonly TaskOutput[]
  readonly caches: readonly { readonly path: string }[]
  /** Environment variables; values that are not strings are passed as JSON. */
  readonly params: YamlMap
  readonly run: {
    readonly path: string
    readonly args: readonly string[]
    readonly dir?: string
    readonly user?: string
  }
  readonly containerLimits?: ContainerLimits
}
