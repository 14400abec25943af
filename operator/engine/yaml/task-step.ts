import { createHash } from "node:crypto"
import { posix } from "node:path"
import { SystemError } from "../../../lib/core/errors.ts"
import { loadTaskConfigFile, validateTaskConfig } from "../../../lib/yaml/parse.ts"
import type { ContainerLimits, TaskConfig, TaskStep, YamlValue } from "../../../lib/yaml/types.ts"
import type { TaskResources } from "../../drivers/driver.ts"
import { cacheVolumePrefix } from "../run-context.ts"
import { readArtifactFile } from "./artifact-files.ts"
import type { TaskImage } from "./registry-image.ts"
import { imageResourceImage } from "./resource-steps.ts"
import { artifactVolume, lookupOf, nextTask, type Outcome, type Scope, type TaskSlot } from "./scope.ts"
import { buildDir, execTask, stepError } from "./task-exec.ts"
import { interpolate, type VarLookup } from "./vars.ts"

/**
 * A task step, as Concourse runs one: the config (inline, or a file read from
 * an artifact and interpolated with the step's `vars`), params merged over
 * the config's as env, inputs and outputs mounted under a fresh working
 * directory, caches kept between runs. Outputs become artifacts of the job
 * under their (mapped) names, whatever the exit code, so hooks can read them.
 * `container_limits` (the step's over the config's, field by field; 0 is no
 * limit, as in Concourse) and `privileged` reach the driver. Not applied:
 * `run.user` and `hermetic` (the task request has no such settings);
 * `platform` is not checked.
 */
export async function runTaskStep(step: TaskStep, scope: Scope): Promise<Outcome> {
  const slot = nextTask(scope, "task", step.name)
  let prepared: Prepared
  try {
    prepared = await prepare(step, scope, slot)
  } catch (error) {
    return stepError(scope, slot, error)
  }
  const run = await execTask(scope, slot, prepared.request)
  if (run.result !== undefined) for (const [name, artifact] of prepared.outputs) scope.artifacts.set(name, artifact)
  return run.outcome
}

type Prepared = {
  readonly request: Parameters<typeof execTask>[2]
  readonly outputs: Map<string, { volume: string }>
}

async function prepare(step: TaskStep, scope: Scope, slot: TaskSlot): Promise<Prepared> {
  const { shared } = scope.state
  const lookup = lookupOf(scope)
  const config = await taskConfig(step, scope, slot, lookup)
  const stepParams = await interpolate(step.params, lookup, "params")
  const inputMapping = await interpolate(step.inputMapping, lookup, "input_mapping")
  const outputMapping = await interpolate(step.outputMapping, lookup, "output_mapping")
  const image = await taskImage(step, config, scope, lookup)
  const dir = buildDir()
  const mounts: Record<string, string> = {}
  const missing: string[] = []
  for (const input of config.inputs) {
    const artifactName = inputMapping[input.name] ?? input.name
    const artifact = scope.artifacts.get(artifactName)
    if (artifact === undefined) {
      if (!input.optional) missing.push(artifactName)
      continue
    }
    mounts[artifactPath(dir, input.path ?? input.name)] = artifact.volume
  }
  const inputMounts = new Map(Object.entries(mounts))
  if (missing.length > 0) {
    const known = [...scope.artifacts.keys()]
    throw new SystemError(
      `missing inputs: ${missing.join(", ")}; a get, put or task output earlier in job "${scope.state.job.name}" must make them${known.length === 0 ? " (none did yet)" : ` (artifacts so far: ${known.join(", ")})`}, or map them with input_mapping`,
    )
  }
  const outputs = new Map<string, { volume: string }>()
  for (const output of config.outputs) {
    const artifactName = outputMapping[output.name] ?? output.name
    const path = artifactPath(dir, output.path ?? output.name)
    // An output at an input's path starts with the input's content, as in
    // Concourse (task docs, "outputs"); inputs are mounted, not copied, so it
    // is the input's volume, changed in place.
    const volume = inputMounts.get(path) ?? artifactVolume(scope, slot, artifactName)
    mounts[path] = volume
    outputs.set(artifactName, { volume })
  }
  config.caches.forEach((cache, index) => {
    mounts[posix.join(dir, cache.path)] =
      `${cacheVolumePrefix}${cacheKey(shared.run.pipelineId, scope.state.job.name, step.name, index)}`
  })
  // The image's own env first: params override it, as in a container whose image sets env.
  const env: Record<string, string> = { ...image.env }
  for (const [name, value] of Object.entries({ ...config.params, ...stepParams })) env[name] = envValue(value)
  const runDir = config.run.dir
  const resources = containerResources({ ...config.containerLimits, ...step.containerLimits })
  return {
    request: {
      image: image.ref,
      command: { path: config.run.path, args: config.run.args },
      env,
      mounts,
      workDir: runDir === undefined ? dir : posix.resolve(dir, runDir),
      ...(resources === undefined ? {} : { resources }),
      ...(step.privileged ? { privileged: true } : {}),
    },
    outputs,
  }
}

/** Concourse's limits as the driver's: cpu shares stay a weight, and 0 is no limit. */
function containerResources(limits: ContainerLimits): TaskResources | undefined {
  const resources = {
    ...(limits.cpu ? { cpuShares: limits.cpu } : {}),
    ...(limits.memoryBytes ? { memoryBytes: limits.memoryBytes } : {}),
  }
  return Object.keys(resources).length === 0 ? undefined : resources
}

/** The inline config, or the task file read from its artifact; either interpolated. */
async function taskConfig(step: TaskStep, scope: Scope, slot: TaskSlot, lookup: VarLookup): Promise<TaskConfig> {
  if (step.config !== undefined) return interpolate(step.config, lookup, "config")
  if (step.file === undefined) throw new SystemError(`task "${step.name}" has neither config nor file`)
  const file = await interpolate(step.file, lookup, "file")
  const text = await readArtifactFile(scope, slot, file, `${slot.path}/file`)
  const vars = await interpolate(step.vars, lookup, "vars")
  // Read as YAML first, so that a variable holding YAML cannot change the
  // structure; then interpolated (vars first, as Concourse's task step does)
  // and only then checked, so variables may stand where a check wants a value.
  const raw = loadTaskConfigFile(text, file)
  return validateTaskConfig(await interpolate(raw, { ...lookup, given: vars }, `task file ${file}`), file)
}

async function taskImage(step: TaskStep, config: TaskConfig, scope: Scope, lookup: VarLookup): Promise<TaskImage> {
  if (step.image !== undefined) {
    const name = await interpolate(step.image, lookup, "image")
    const artifact = scope.artifacts.get(name)
    if (artifact === undefined) throw new SystemError(`task "${step.name}": image artifact "${name}" does not exist`)
    if (artifact.image === undefined) {
      throw new SystemError(
        `task "${step.name}": artifact "${name}" holds no image runnel can run; get it from a registry-image resource, or a mock resource with mirror_self`,
      )
    }
    return artifact.image
  }
  if (config.imageResource !== undefined) return imageResourceImage(scope, config.imageResource)
  const rootfs = config.rootfsUri
  if (rootfs?.startsWith("docker:///")) return { ref: rootfs.slice("docker:///".length).replace(/#/, ":"), env: {} }
  throw new SystemError(
    `task "${step.name}" has no image; give its config image_resource: {type: registry-image, source: {repository: busybox}}`,
  )
}

/**
 * Where an input or output is mounted: relative to the working directory, an
 * absolute path as it is ("Absolute paths are respected",
 * concourse-ci.org/tasks.html, inputs and outputs). Caches stay relative, as
 * Concourse's do.
 */
function artifactPath(dir: string, path: string): string {
  return posix.resolve(dir, path)
}

/** Params become env: strings as they are, other values as JSON (Concourse does the same). */
export function envValue(value: YamlValue): string {
  if (typeof value === "string") return value
  if (value === null) return ""
  return typeof value === "object" ? JSON.stringify(value) : String(value)
}

/** A cache key the driver contract accepts: stable for a pipeline, job, task and cache, lowercase. */
function cacheKey(pipelineId: string, job: string, task: string, index: number): string {
  const raw = `${pipelineId}-${job}-${task}-${index}`
  const safe = raw.toLowerCase().replace(/[^a-z0-9._-]/g, "-")
  if (safe === raw && raw.length <= 180) return `cache-${raw}`
  const hash = createHash("sha256").update(raw).digest("hex").slice(0, 16)
  return `cache-${safe.slice(0, 160)}-${hash}`
}
