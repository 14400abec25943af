import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join, posix } from "node:path"
import { errorMessage } from "../../../lib/core/errors.ts"
import type { TaskLog } from "../../../lib/logs/task-log.ts"
import type { YamlMap } from "../../../lib/yaml/types.ts"
import type { OutboundPolicy } from "../outbound.ts"
import type { RunContext } from "../run-context.ts"
import { fetchDisabledMessage } from "../script-fetch.ts"
import type { TaskRequest } from "../task-request.ts"
import { mockCheck, mockGetTask, mockMetadata, mockPutVersion, mockType } from "../yaml/mock-resource.ts"
import { checkVersions, coreTypes, fetchedVersion, parseAnswer, protocolTask } from "../yaml/resource-protocol.ts"
import type { MetadataField, Version } from "../yaml/versions.ts"
import { downloadTask, unpackArchive, uploadTasks, type VolumePlace } from "./volume-files.ts"

type GitResource = typeof import("./git-resource.ts")

export type ResourceOperation = "check" | "fetch" | "push"

/** A `nativeResources.check/fetch/push` call as the prelude passes it: volumes by their run names. */
export type ResourceRequest = {
  readonly operation: ResourceOperation
  readonly type: unknown
  readonly source?: unknown
  readonly params?: unknown
  readonly version?: unknown
  /** fetch: where the resource goes. */
  readonly destDir?: VolumePlace
  /** push, git: the clone to push (`params.repository`). */
  readonly repository?: VolumePlace
  /** push, other types: volumes mounted as the put's inputs, by name. */
  readonly inputs?: Readonly<Record<string, VolumePlace>>
  /** Any other type: the image of its Concourse resource (`concourse/<type>-resource` for Concourse's own types). */
  readonly image?: unknown
}

/** check: the versions, oldest first; fetch and push: the version and its metadata. */
export type ResourceAnswer =
  | readonly Version[]
  | { readonly version: Version; readonly metadata: readonly MetadataField[] }

export type NativeResourcesDeps = {
  readonly context: RunContext
  /** The small image with a shell, base64 and tar that copies files and runs mock fetches (`--mock-image`). */
  readonly mockImage: string
  readonly policy: OutboundPolicy
  /**
   * The `fetch` feature: native git reaches the network from the operator, as
   * fetch() does, so it is blocked with it (interface.md: "outbound requests
   * from pipelines are blocked").
   */
  readonly fetchEnabled: boolean
  readonly signal: AbortSignal
}

/**
 * `nativeResources.check/fetch/push` of a script: each call is a task of the
 * run (`tasks/<n>/<type>-<operation>`). `secret:` strings anywhere in
 * `source` and `params` are resolved first. Types: `mock` (Concourse's mock
 * resource, as the YAML interpreter runs it), `git` (in the operator,
 * git-resource.ts), and any other through the Concourse resource protocol in
 * its image, with the YAML interpreter's protocol code (yaml/resource-protocol.ts).
 */
export function nativeResources(deps: NativeResourcesDeps): (request: ResourceRequest) => Promise<ResourceAnswer> {
  return async (request) => {
    const { operation } = request
    const type = request.type
    const kind = resourceKind(type, request.image)
    const source = mapOf(request.source, `nativeResources.${operation}: source`)
    const params = mapOf(request.params, `nativeResources.${operation}: params`)
    const version =
      request.version === undefined || request.version === null ? undefined : versionOf(request.version, operation)
    if (operation === "fetch" && request.destDir === undefined) {
      throw new TypeError(
        `nativeResources.fetch: destDir is required, a volume from volumes.create() or { volume, path }`,
      )
    }
    // isomorphic-git is loaded by the first run that uses git; a bad source is refused before any task is recorded.
    const git = kind.kind === "git" ? await import("./git-resource.ts") : undefined
    git?.gitSource(source)
    if (git !== undefined && !deps.fetchEnabled) {
      throw new Error(
        `nativeResources: ${fetchDisabledMessage}; git reaches the network from runnel's operator, as fetch() does`,
      )
    }
    return deps.context.runOperation(`${String(type)}-${operation}`, async (log, path) => {
      const where = `nativeResources.${operation} (${path})`
      const resolved = {
        source: (await deps.context.resolveSecretsIn(source, `${where} source`)) as YamlMap,
        params: (await deps.context.resolveSecretsIn(params, `${where} params`)) as YamlMap,
      }
      const step = new Step(deps, log, path)
      if (kind.kind === "mock") return step.mock(request, resolved.source, resolved.params, version)
      if (kind.kind === "protocol") return step.protocol(kind.image, request, resolved.source, resolved.params, version)
      return step.git(git as GitResource, request, resolved.source, resolved.params, version)
    })
  }
}

type Kind = { readonly kind: "mock" } | { readonly kind: "git" } | { readonly kind: "protocol"; readonly image: string }

function resourceKind(type: unknown, image: unknown): Kind {
  // The type names the operation's task (tasks/<n>/<type>-<operation>), so it is a task name's characters.
  if (typeof type !== "string" || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$/.test(type)) {
    throw new TypeError(
      `nativeResources: type must be a resource type such as "git", "mock" or "s3", not ${JSON.stringify(type)}`,
    )
  }
  if (image !== undefined) {
    if (typeof image !== "string" || image === "")
      throw new TypeError("nativeResources: image must be an image reference")
    return { kind: "protocol", image }
  }
  if (type === mockType) return { kind: "mock" }
  if (type === "git") return { kind: "git" }
  if (coreTypes.has(type)) return { kind: "protocol", image: `concourse/${type}-resource` }
  throw new TypeError(
    `nativeResources: unknown resource type "${type}"; known: mock, git, ${[...coreTypes].filter((name) => name !== "git").join(", ")}; for another Concourse resource type give its image too, such as { type: "${type}", image: "org/${type}-resource" }`,
  )
}

/** One operation's work, inside its task. */
class Step {
  readonly #deps: NativeResourcesDeps
  readonly #log: TaskLog
  readonly #path: string
  #tasks = 0

  constructor(deps: NativeResourcesDeps, log: TaskLog, path: string) {
    this.#deps = deps
    this.#log = log
    this.#path = path
  }

  async mock(
    request: ResourceRequest,
    source: YamlMap,
    params: YamlMap,
    version: Version | undefined,
  ): Promise<ResourceAnswer> {
    if (request.operation === "check") {
      const found = mockCheck(source, version)
      return found === undefined ? [] : [found]
    }
    if (request.operation === "push") return { version: mockPutVersion(params), metadata: mockMetadata(source) }
    const fetched = version ?? mockCheck(source, undefined)
    if (fetched === undefined) throw new Error("mock resource has no version (no_initial_version): pass version")
    const place = request.destDir as VolumePlace
    const dir = posix.join("/tmp/build/get", place.path)
    const task = mockGetTask(this.#deps.mockImage, dir, place.volume, fetched, source, params)
    await this.#run({ ...task, mounts: { "/tmp/build/get": place.volume } })
    return { version: fetched, metadata: mockMetadata(source) }
  }

  async git(
    { gitCheck, gitFetch, gitPush, gitSource }: GitResource,
    request: ResourceRequest,
    rawSource: YamlMap,
    params: YamlMap,
    version: Version | undefined,
  ): Promise<ResourceAnswer> {
    const source = gitSource(rawSource)
    const gitDeps = {
      policy: this.#deps.policy,
      signal: this.#deps.signal,
      progress: (line: string) => this.#log.stdout(`${line}\n`),
    }
    const dir = await mkdtemp(join(tmpdir(), "runnel-git-"))
    try {
      if (request.operation === "check") return await gitCheck(source, version, dir, gitDeps)
      if (request.operation === "fetch") {
        const fetched = await gitFetch(source, version, dir, gitDeps)
        for (const task of await uploadTasks(this.#deps.mockImage, dir, request.destDir as VolumePlace))
          await this.#run(task)
        return fetched
      }
      if (request.repository === undefined) {
        throw new TypeError(
          "nativeResources.push (git): params.repository is required, the volume holding the clone to push",
        )
      }
      const archive = await this.#run(downloadTask(this.#deps.mockImage, request.repository))
      await unpackArchive(Buffer.from(archive.replace(/\s+/g, ""), "base64"), dir)
      return { version: await gitPush(source, params, dir, gitDeps), metadata: [] }
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  }

  async protocol(
    image: string,
    request: ResourceRequest,
    source: YamlMap,
    params: YamlMap,
    version: Version | undefined,
  ): Promise<ResourceAnswer> {
    const check = async () => {
      const stdout = await this.#run(
        protocolTask(image, "check", { source, version: version ?? null }, "/tmp/build/check", {}),
      )
      return answered(() => checkVersions(parseAnswer(stdout, "check")))
    }
    if (request.operation === "check") return check()
    if (request.operation === "fetch") {
      const fetched = version ?? (await check()).at(-1)
      if (fetched === undefined) throw new Error(`the ${image} resource has no versions`)
      const place = request.destDir as VolumePlace
      const dir = posix.join("/tmp/build/get", place.path)
      const task = protocolTask(image, "in", { source, version: fetched, params }, dir, {
        "/tmp/build/get": place.volume,
      })
      const stdout = await this.#run(task)
      return answered(() => fetchedVersion(parseAnswer(stdout, "in"), "in"))
    }
    const mounts: Record<string, string> = {}
    for (const [name, place] of Object.entries(request.inputs ?? {}))
      mounts[posix.join("/tmp/build/put", name)] = place.volume
    const task = protocolTask(image, "out", { source, params }, "/tmp/build/put", mounts)
    const stdout = await this.#run(task)
    return answered(() => fetchedVersion(parseAnswer(stdout, "out"), "out"))
  }

  /** Runs a driver task for this operation (not a task of its own): its stderr goes to the operation's output; answers its stdout. */
  async #run(task: Omit<TaskRequest, "name">): Promise<string> {
    const name = `${this.#path.split("/").at(-1)}-${++this.#tasks}`
    const result = await this.#deps.context.runTaskAt(
      `${this.#path}/${this.#tasks}`,
      { ...task, name },
      { internal: true },
    )
    if (result.stderr !== "") this.#log.stderr(result.stderr.endsWith("\n") ? result.stderr : `${result.stderr}\n`)
    if (result.code !== 0 || result.timedOut) {
      const last = result.stderr.trim().split("\n").at(-1) ?? ""
      throw new Error(`its task in ${task.image} exited ${result.code}${last === "" ? "" : `: ${last}`}`)
    }
    return result.stdout
  }
}

/**
 * The resource's answer read with the YAML interpreter's code, which throws
 * SystemError (a YAML step errors); for a script a resource that answers
 * wrongly is a failure it may catch, not the end of the run.
 */
function answered<T>(read: () => T): T {
  try {
    return read()
  } catch (error) {
    throw new Error(errorMessage(error))
  }
}

function mapOf(value: unknown, what: string): YamlMap {
  if (value === undefined || value === null) return {}
  if (typeof value !== "object" || Array.isArray(value))
    throw new TypeError(`${what} must be an object, not ${JSON.stringify(value)}`)
  return value as YamlMap
}

function versionOf(value: unknown, operation: string): Version {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`nativeResources.${operation}: version must be an object of strings such as { ref: "abc123" }`)
  }
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, String(item)]))
}
