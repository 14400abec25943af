import { createHash } from "node:crypto"
import { posix } from "node:path"
import { SystemError } from "../../../lib/core/errors.ts"
import { loadTaskConfigFile, validateTaskConfig } from "../../../lib/yaml/parse.ts"
import type { ImageResource, TaskConfig, TaskStep, YamlMap, YamlValue } from "../../../lib/yaml/types.ts"
import { cacheVolumePrefix } from "../run-context.ts"
import { readArtifactFile } from "./artifact-files.ts"
import { artifactVolume, lookupOf, nextTask, type Outcome, type Scope, type TaskSlot } from "./scope.ts"
import { buildDir, execTask, stepError } from "./task-exec.ts"
import { interpolate, type VarLookup } from "./vars.ts"

/**
 * A task step, as Concourse runs one: the config (inline, or a file read from
 * an artifact and interpolated with the step's `vars`), params merged over
 * the config's as env, inputs and outputs mounted under a fresh working
 * directory, caches kept between runs. Outputs become artifacts of the job
 * under their (mapped) names, whatever the exit code, so hooks can read them.
 * Not applied: `privileged`, `container_limits`, `run.user` and `hermetic`
 * (the task request has no such settings); `platform` is not checked.
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
    mounts[posix.join(dir, input.path ?? input.name)] = artifact.volume
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
    const path = posix.join(dir, output.path ?? output.name)
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
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries({ ...config.params, ...stepParams })) env[name] = envValue(value)
  const runDir = config.run.dir
  return {
    request: {
      image,
      command: { path: config.run.path, args: config.run.args },
      env,
      mounts,
      workDir: runDir === undefined ? dir : posix.resolve(dir, runDir),
    },
    outputs,
  }
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

async function taskImage(step: TaskStep, config: TaskConfig, scope: Scope, lookup: VarLookup): Promise<string> {
  const { mockImage } = scope.state.shared.deps
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
  if (config.imageResource !== undefined) return imageOf(config.imageResource, mockImage)
  const rootfs = config.rootfsUri
  if (rootfs?.startsWith("docker:///")) return rootfs.slice("docker:///".length).replace(/#/, ":")
  throw new SystemError(
    `task "${step.name}" has no image; give its config image_resource: {type: registry-image, source: {repository: busybox}}`,
  )
}

/** The image reference an image_resource names; a mock one stands for the mock image. */
export function imageOf(resource: ImageResource, mockImage: string): string {
  if (resource.type === "mock") return mockImage
  return registryImage(resource.source, resource.version)
}

/** `repository@digest` when the version pins one, else `repository:tag` (tag `latest` by default). */
export function registryImage(source: YamlMap, version?: Readonly<Record<string, string>>): string {
  const repository = source.repository
  if (typeof repository !== "string" || repository === "") {
    throw new SystemError("a registry-image source needs repository, for example repository: busybox")
  }
  const digest = version?.digest
  if (digest !== undefined) return `${repository}@${digest}`
  const tag = source.tag
  return `${repository}:${typeof tag === "string" || typeof tag === "number" ? String(tag) : "latest"}`
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
