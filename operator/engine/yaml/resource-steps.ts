import { posix } from "node:path"
import { errorMessage, SystemError } from "../../../lib/core/errors.ts"
import type { GetStep, ImageResource, PutStep, Resource, YamlMap } from "../../../lib/yaml/types.ts"
import { readArtifactFile } from "./artifact-files.ts"
import {
  mirroredImage,
  mockCheck,
  mockGetTask,
  mockMetadata,
  mockMirrorsSelf,
  mockPutTask,
  mockPutVersion,
  mockType,
} from "./mock-resource.ts"
import { registryImage, type TaskImage } from "./registry-image.ts"
import {
  checkVersions,
  coreTypes,
  fetchedVersion,
  parseAnswer,
  protocolTask,
  withDefaults,
} from "./resource-protocol.ts"
import {
  type Artifact,
  artifactVolume,
  lookupOf,
  nextTask,
  noteError,
  type Outcome,
  type Scope,
  type TaskSlot,
} from "./scope.ts"
import { execTask, stepError } from "./task-exec.ts"
import { interpolate } from "./vars.ts"
import { type MetadataField, sameVersion, type Version } from "./versions.ts"

const imageTypes = new Set(["registry-image", "docker-image"])

type Impl =
  /** `mirrored`: the version the resource type's mirrored image carries (MIRRORED_VERSION), none for the base mock. */
  | { readonly kind: "mock"; readonly mirrored?: string }
  | { readonly kind: "protocol"; readonly image: string; readonly defaults: YamlMap }

type Prepared = { readonly resource: Resource; readonly source: YamlMap; readonly impl: Impl }

async function prepare(scope: Scope, name: string): Promise<Prepared> {
  const { pipeline } = scope.state.shared
  const resource = pipeline.resources.find((candidate) => candidate.name === name)
  if (resource === undefined) throw new SystemError(`the pipeline has no resource "${name}"`)
  const lookup = lookupOf(scope)
  const source = await interpolate(resource.source, lookup, `source of resource "${resource.name}"`)
  const type = pipeline.resourceTypes.find((candidate) => candidate.name === resource.type)
  if (type !== undefined) {
    const defaults = await interpolate(type.defaults, lookup, `defaults of resource type "${type.name}"`)
    const impl = await typeImpl(scope, type.name, [])
    return {
      resource,
      source: withDefaults(source, defaults),
      impl: impl.kind === "mock" ? impl : { ...impl, defaults },
    }
  }
  if (resource.type === mockType) return { resource, source, impl: { kind: "mock" } }
  if (coreTypes.has(resource.type)) {
    return { resource, source, impl: { kind: "protocol", image: `concourse/${resource.type}-resource`, defaults: {} } }
  }
  throw new SystemError(
    `resource "${resource.name}" is of type "${resource.type}", which is neither mock, a Concourse core type nor declared in resource_types`,
  )
}

/**
 * How resources of the declared resource type `name` run: in the image a get
 * of the type's own `source` with its own `type` would fetch. That type may be
 * another declared type (a declared type wins over a base type of the same
 * name, testflight resource-type-named-as-base-type.yml), resolved the same
 * way (testflight recursive-resource-checking.yml: a mock type whose type is a
 * mock type whose type is mock). The chain ends at `mock` (the resources run
 * as the mock resource, which stands for the image it mirrors, carrying the
 * type's own version as MIRRORED_VERSION) or at `registry-image`/
 * `docker-image` (the image its source names); a type named after one of
 * those, overriding it, fetches images the same way.
 */
async function typeImpl(scope: Scope, name: string, seen: readonly string[]): Promise<Impl> {
  if (seen.includes(name)) {
    throw new SystemError(`resource types ${[...seen, name].map((n) => `"${n}"`).join(" -> ")} form a cycle`)
  }
  const { pipeline } = scope.state.shared
  const type = pipeline.resourceTypes.find((candidate) => candidate.name === name)
  if (type === undefined) throw new SystemError(`the pipeline has no resource type "${name}"`)
  const source = await interpolate(type.source, lookupOf(scope), `source of resource type "${type.name}"`)
  const parent = pipeline.resourceTypes.find((candidate) => candidate.name === type.type && candidate.name !== name)
  if (parent !== undefined) {
    const impl = await typeImpl(scope, parent.name, [...seen, name])
    if (impl.kind === "mock") return mirroredType(source, impl.mirrored)
    if (!imageTypes.has(parent.name)) {
      throw new SystemError(
        `resource type "${type.name}" is of type "${type.type}", which fetches no image runnel can run; the chain of resource types must end at registry-image, docker-image or mock`,
      )
    }
  } else if (type.type === mockType) {
    return mirroredType(source, undefined)
  } else if (!imageTypes.has(type.type)) {
    throw new SystemError(
      `resource type "${type.name}" is of type "${type.type}"; runnel runs resource types from registry-image or docker-image (or mock)`,
    )
  }
  return { kind: "protocol", image: registryImage(source), defaults: {} }
}

/** A mock-based type: its image's version is what a mock check of its source gives, in its parent's image. */
function mirroredType(source: YamlMap, parentMirrored: string | undefined): Impl {
  const version = mockCheck(source, undefined, parentMirrored)?.version
  return version === undefined ? { kind: "mock" } : { kind: "mock", mirrored: version }
}

/**
 * The image a task's image_resource names. Its type may be one of the
 * pipeline's resource_types (concourse-ci.org/tasks.html, image_resource:
 * "the type of the resource"; Concourse fetches it as a get of that type
 * would), resolved as a resource's type is: a chain ending at mock runs in the
 * mock image, which a mock with mirror_self stands for, carrying the version
 * the mock would fetch (testflight resource-types.yml expects
 * MIRRORED_VERSION=image-version); a type overriding registry-image or
 * docker-image takes the image its source names. Other types' images hold a
 * resource's scripts, not a root file system runnel could start, so they are
 * refused, saying so.
 */
export async function imageResourceImage(scope: Scope, image: ImageResource): Promise<TaskImage> {
  const { pipeline, deps } = scope.state.shared
  const declared = pipeline.resourceTypes.some((candidate) => candidate.name === image.type)
  if (!declared && imageTypes.has(image.type)) return { ref: registryImage(image.source, image.version), env: {} }
  if (!declared && image.type !== mockType) {
    throw new SystemError(
      `image_resource type "${image.type}" is neither registry-image, docker-image, mock nor declared in resource_types`,
    )
  }
  const impl: Impl = declared ? await typeImpl(scope, image.type, []) : { kind: "mock" }
  if (impl.kind === "mock") {
    const pinned = image.version?.version
    const version = pinned === undefined ? mockCheck(image.source, undefined, impl.mirrored) : { version: pinned }
    return version === undefined ? { ref: deps.mockImage, env: {} } : mirroredImage(deps.mockImage, version)
  }
  if (imageTypes.has(image.type)) return { ref: registryImage(image.source, image.version), env: {} }
  throw new SystemError(
    `image_resource type "${image.type}" runs as resource type image "${impl.image}", whose get gives no image runnel can start; use a registry-image image_resource, or a resource type that is (or ends at) mock`,
  )
}

/** A get step: fetch a version of the resource into an artifact named after the step. */
export async function runGetStep(step: GetStep, scope: Scope): Promise<Outcome> {
  const slot = nextTask(scope, "get", step.name)
  let prepared: Prepared
  let params: YamlMap
  let fixed: Version | undefined
  try {
    prepared = await prepare(scope, step.resource)
    const lookup = lookupOf(scope)
    params = await interpolate(step.params, lookup, "params")
    const asked = step.version === undefined ? undefined : await interpolate(step.version, lookup, "version")
    fixed = typeof asked === "object" ? asked : passedVersion(scope, step.passed, step.resource)
  } catch (error) {
    return stepError(scope, slot, error)
  }
  return fetch(scope, slot, step.name, prepared, params, fixed)
}

/** A put step, then its implicit get of the version it created (unless no_get), as the put's own artifact. */
export async function runPutStep(step: PutStep, scope: Scope): Promise<Outcome> {
  const slot = nextTask(scope, "put", step.name)
  let prepared: Prepared
  let params: YamlMap
  let getParams: YamlMap
  try {
    prepared = await prepare(scope, step.resource)
    const lookup = lookupOf(scope)
    params = await interpolate(step.params, lookup, "params")
    getParams = await interpolate(step.getParams, lookup, "get_params")
  } catch (error) {
    return stepError(scope, slot, error)
  }
  const dir = "/tmp/build/put"
  let version: Version
  let metadata: MetadataField[]
  const { mockImage } = scope.state.shared.deps
  if (prepared.impl.kind === "mock") {
    try {
      // The mock's out reads the version from `file` when given (concourse/mock-resource README, out params).
      const file = typeof params.file === "string" ? params.file : undefined
      version =
        file === undefined
          ? mockPutVersion(params)
          : { version: (await readArtifactFile(scope, slot, file, `${slot.path}/file`)).trim() }
    } catch (error) {
      return stepError(scope, slot, error)
    }
    metadata = mockMetadata(prepared.source)
    const run = await execTask(scope, slot, mockPutTask(mockImage, dir, version, prepared.source, params))
    if (run.outcome !== "success") return run.outcome
  } else {
    const mounts: Record<string, string> = {}
    const names = Array.isArray(step.inputs) ? step.inputs : [...scope.artifacts.keys()]
    for (const name of names) {
      const artifact = scope.artifacts.get(name)
      if (artifact === undefined) return stepError(scope, slot, new SystemError(`missing inputs: ${name}`))
      mounts[posix.join(dir, name)] = artifact.volume
    }
    const request = { source: prepared.source, params }
    const run = await execTask(scope, slot, protocolTask(prepared.impl.image, "out", request, dir, mounts), {
      captureStdout: true,
    })
    if (run.outcome !== "success" || run.result === undefined) return run.outcome
    try {
      ;({ version, metadata } = fetchedVersion(parseAnswer(run.result.stdout, "out"), "out"))
    } catch (error) {
      return answerError(scope, slot, error)
    }
  }
  const recorded = await record(scope, prepared.resource.name, version, metadata)
  if (recorded !== "success") return recorded
  if (step.noGet) return "success"
  return fetch(scope, nextTask(scope, "get", step.name), step.name, prepared, getParams, version)
}

/**
 * The version the jobs named in `passed:` fetched or put in this run. With
 * several jobs (fan-in), only a version that went through every one of them
 * that touched the resource in this run qualifies, as Concourse's scheduler
 * picks a version that passed all the named jobs (concourse-ci.org, get step:
 * "passed"); jobs that did not run (skipped by webhook_trigger) constrain
 * nothing. Undefined when none of them recorded one.
 */
function passedVersion(scope: Scope, passed: readonly string[], resource: string): Version | undefined {
  const seen: { job: string; version: Version }[] = []
  for (const job of passed) {
    const version = scope.state.shared.jobVersions.get(job)?.get(resource)
    if (version !== undefined) seen.push({ job, version })
  }
  const first = seen[0]
  if (first === undefined) return undefined
  const other = seen.find((entry) => !sameVersion(entry.version, first.version))
  if (other !== undefined) {
    throw new SystemError(
      `no version of resource "${resource}" passed all of ${passed.map((job) => `"${job}"`).join(", ")} in this run: job "${first.job}" had ${JSON.stringify(first.version)}, job "${other.job}" had ${JSON.stringify(other.version)}`,
    )
  }
  return first.version
}

async function fetch(
  scope: Scope,
  slot: TaskSlot,
  artifactName: string,
  prepared: Prepared,
  params: YamlMap,
  fixed: Version | undefined,
): Promise<Outcome> {
  const { resource, source, impl } = prepared
  const { deps } = scope.state.shared
  const volume = artifactVolume(scope, slot, artifactName)
  const dir = posix.join("/tmp/build/get", artifactName)
  let version = fixed ?? resource.version
  let metadata: MetadataField[] = []
  let image: TaskImage | undefined
  if (impl.kind === "mock") {
    try {
      if (version === undefined && typeof params.version === "string") version = { version: params.version }
      version ??= mockCheck(source, await deps.versions.latest(resource.name), impl.mirrored)
      if (version === undefined) {
        throw new SystemError(`resource "${resource.name}" has no version yet (no_initial_version); put one first`)
      }
      metadata = mockMetadata(source)
      const request = mockGetTask(deps.mockImage, dir, volume, version, source, params)
      const run = await execTask(scope, slot, request)
      if (run.outcome !== "success") return run.outcome
    } catch (error) {
      return stepError(scope, slot, error)
    }
    if (mockMirrorsSelf(source, params)) image = mirroredImage(deps.mockImage, version)
  } else {
    let inSlot = slot
    try {
      version ??= await deps.versions.latest(resource.name)
    } catch (error) {
      return stepError(scope, slot, error)
    }
    if (version === undefined) {
      // Nothing recorded yet: check first. The check is a task of its own; the get then takes the next n.
      const check = await execTask(
        scope,
        slot,
        protocolTask(impl.image, "check", { source, version: null }, "/tmp/build/check", {}),
        { captureStdout: true },
      )
      if (check.outcome !== "success" || check.result === undefined) return check.outcome
      try {
        version = checkVersions(parseAnswer(check.result.stdout, "check")).at(-1)
      } catch (error) {
        return answerError(scope, slot, error)
      }
      if (version === undefined) {
        noteError(scope, `${slot.path}: resource "${resource.name}" has no versions`)
        return "error"
      }
      inSlot = nextTask(scope, "get", artifactName)
    }
    const run = await execTask(
      scope,
      inSlot,
      protocolTask(impl.image, "in", { source, version, params }, dir, { [dir]: volume }),
      { captureStdout: true },
    )
    if (run.outcome !== "success" || run.result === undefined) return run.outcome
    try {
      ;({ version, metadata } = fetchedVersion(parseAnswer(run.result.stdout, "in"), "in"))
    } catch (error) {
      return answerError(scope, inSlot, error)
    }
    if (imageTypes.has(resource.type)) image = { ref: registryImage(source, version), env: {} }
  }
  const recorded = await record(scope, resource.name, version, metadata)
  if (recorded !== "success") return recorded
  const artifact: Artifact = image === undefined ? { volume } : { volume, image }
  scope.artifacts.set(artifactName, artifact)
  return "success"
}

async function record(scope: Scope, resource: string, version: Version, metadata: MetadataField[]): Promise<Outcome> {
  const { shared, job } = scope.state
  const byResource = shared.jobVersions.get(job.name) ?? new Map<string, Version>()
  byResource.set(resource, version)
  shared.jobVersions.set(job.name, byResource)
  try {
    await shared.deps.versions.record(resource, version, metadata)
    return "success"
  } catch (error) {
    noteError(scope, `recording a version of resource "${resource}": ${errorMessage(error)}`)
    return "error"
  }
}

/** A resource answered, but not as the protocol says: the step errors (its task already ended). */
function answerError(scope: Scope, slot: TaskSlot, error: unknown): Outcome {
  noteError(scope, `${slot.path}: ${errorMessage(error)}`)
  return "error"
}
