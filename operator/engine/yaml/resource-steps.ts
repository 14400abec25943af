import { posix } from "node:path"
import { errorMessage, SystemError } from "../../../lib/core/errors.ts"
import type { GetStep, PutStep, Resource, YamlMap } from "../../../lib/yaml/types.ts"
import { readArtifactFile } from "./artifact-files.ts"
import {
  mockCheck,
  mockGetTask,
  mockMetadata,
  mockMirrorsSelf,
  mockPutTask,
  mockPutVersion,
  mockType,
} from "./mock-resource.ts"
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
import { registryImage } from "./task-step.ts"
import { interpolate } from "./vars.ts"
import { type MetadataField, sameVersion, type Version } from "./versions.ts"

const imageTypes = new Set(["registry-image", "docker-image"])

type Impl =
  | { readonly kind: "mock" }
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
 * another declared type, resolved the same way (Concourse's testflight
 * fixture recursive-resource-checking.yml: a mock type whose type is a mock
 * type whose type is mock). The chain ends at `mock` (the resources run as the
 * mock resource, which stands for the image it mirrors) or at
 * `registry-image`/`docker-image` (the image its source names); a type named
 * after one of those, overriding it, fetches images the same way.
 */
async function typeImpl(scope: Scope, name: string, seen: readonly string[]): Promise<Impl> {
  if (seen.includes(name)) {
    throw new SystemError(`resource types ${[...seen, name].map((n) => `"${n}"`).join(" -> ")} form a cycle`)
  }
  const { pipeline } = scope.state.shared
  const type = pipeline.resourceTypes.find((candidate) => candidate.name === name)
  if (type === undefined) throw new SystemError(`the pipeline has no resource type "${name}"`)
  if (type.type === mockType) return { kind: "mock" }
  const parent = pipeline.resourceTypes.find((candidate) => candidate.name === type.type && candidate.name !== name)
  if (parent !== undefined) {
    const impl = await typeImpl(scope, parent.name, [...seen, name])
    if (impl.kind === "mock") return impl
    if (!imageTypes.has(parent.name)) {
      throw new SystemError(
        `resource type "${type.name}" is of type "${type.type}", which fetches no image runnel can run; the chain of resource types must end at registry-image, docker-image or mock`,
      )
    }
  } else if (!imageTypes.has(type.type)) {
    throw new SystemError(
      `resource type "${type.name}" is of type "${type.type}"; runnel runs resource types from registry-image or docker-image (or mock)`,
    )
  }
  const source = await interpolate(type.source, lookupOf(scope), `source of resource type "${type.name}"`)
  return { kind: "protocol", image: registryImage(source), defaults: {} }
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
    const run = await execTask(scope, slot, mockPutTask(mockImage, dir, version, metadata, params))
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
  let image: string | undefined
  if (impl.kind === "mock") {
    try {
      if (version === undefined && typeof params.version === "string") version = { version: params.version }
      version ??= mockCheck(source, await deps.versions.latest(resource.name))
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
    if (mockMirrorsSelf(source, params)) image = deps.mockImage
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
    if (imageTypes.has(resource.type)) image = registryImage(source, version)
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
