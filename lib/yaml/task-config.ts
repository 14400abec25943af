import { type Checker, describe, hasVariable, isMapping, type Node } from "./checker.ts"
import type { ContainerLimits, ImageResource, TaskConfig, TaskInput, TaskOutput } from "./types.ts"

const taskConfigKeys = [
  "platform",
  "image_resource",
  "rootfs_uri",
  "container_limits",
  "inputs",
  "outputs",
  "caches",
  "params",
  "run",
] as const
/** The image_resource types whose source runnel reads itself; any other names a type of `resource_types`. */
const registryTypes = new Set(["registry-image", "docker-image"])

/**
 * Reads a task config (a step's `config:` or a task file), recording problems
 * on `c`. Returns undefined when it is not a mapping or misses `platform` or `run`.
 */
export function readTaskConfig(c: Checker, node: Node): TaskConfig | undefined {
  if (c.mapping(node, "the task config", taskConfigKeys) === undefined) return undefined
  const platform = c.child(node, "platform")
  const platformText = platform === undefined ? undefined : c.string(platform)
  if (platform === undefined) c.problem(node, "the task config needs a platform, for example platform: linux")
  const runNode = c.child(node, "run")
  const run = runNode === undefined ? undefined : readRun(c, runNode)
  if (runNode === undefined) {
    c.problem(node, 'the task config needs run: with a path, for example run: {path: sh, args: [-c, "make test"]}')
  }
  const imageNode = c.child(node, "image_resource")
  const imageResource = imageNode === undefined ? undefined : readImageResource(c, imageNode)
  const rootfs = c.child(node, "rootfs_uri")
  const rootfsUri = rootfs === undefined ? undefined : c.string(rootfs)
  const limits = c.child(node, "container_limits")
  const containerLimits = limits === undefined ? undefined : readContainerLimits(c, limits)
  if (platformText === undefined || run === undefined) return undefined
  return {
    platform: platformText,
    ...(imageResource === undefined ? {} : { imageResource }),
    ...(rootfsUri === undefined ? {} : { rootfsUri }),
    inputs: namedEntries(c, c.child(node, "inputs"), "input", ["name", "path", "optional"]).map(
      ({ entry, name }): TaskInput => ({
        name,
        ...optionalString(c, c.child(entry, "path"), "path"),
        optional: c.boolean(c.child(entry, "optional")),
      }),
    ),
    outputs: namedEntries(c, c.child(node, "outputs"), "output", ["name", "path"]).map(
      ({ entry, name }): TaskOutput => ({ name, ...optionalString(c, c.child(entry, "path"), "path") }),
    ),
    caches: readCaches(c, c.child(node, "caches")),
    params: c.freeMapping(c.child(node, "params")),
    run,
    ...(containerLimits === undefined ? {} : { containerLimits }),
  }
}

function readRun(c: Checker, node: Node): TaskConfig["run"] | undefined {
  if (c.mapping(node, "run", ["path", "args", "dir", "user"]) === undefined) return undefined
  const pathNode = c.child(node, "path")
  const path = pathNode === undefined ? undefined : c.string(pathNode)
  if (pathNode === undefined) c.problem(node, "run needs the path of the program to run, for example path: sh")
  else if (path === "") c.problem(pathNode, "must not be empty")
  const args = c.stringList(c.child(node, "args"))
  if (path === undefined || path === "") return undefined
  return {
    path,
    args,
    ...optionalString(c, c.child(node, "dir"), "dir"),
    ...optionalString(c, c.child(node, "user"), "user"),
  }
}

function readImageResource(c: Checker, node: Node): ImageResource | undefined {
  if (c.mapping(node, "image_resource", ["type", "source", "params", "version"]) === undefined) return undefined
  const typeNode = c.child(node, "type")
  if (typeNode === undefined) {
    return c.problem(
      node,
      "image_resource needs a type: registry-image (or docker-image), mock or one of resource_types",
    )
  }
  // Any other type names one of the pipeline's resource_types, looked up when the task runs, as a get's type is.
  const type = c.string(typeNode)
  if (type === "") c.problem(typeNode, "must not be empty")
  const sourceNode = c.child(node, "source")
  const source = c.freeMapping(sourceNode)
  const params = c.freeMapping(c.child(node, "params"))
  const versionNode = c.child(node, "version")
  const version = versionNode === undefined ? undefined : c.stringMapping(versionNode)
  if (type === undefined || type === "") return undefined
  if (type === "mock") {
    const mirror = sourceNode === undefined ? undefined : c.child(sourceNode, "mirror_self")
    if (mirror !== undefined) c.boolean(mirror)
  } else if (registryTypes.has(type)) {
    checkRegistrySource(c, node, type, sourceNode)
  }
  return { type, source, params, ...(version === undefined ? {} : { version }) }
}

/** A registry-image or docker-image source must name the image's repository. */
function checkRegistrySource(c: Checker, node: Node, type: string, sourceNode: Node | undefined): void {
  if (sourceNode === undefined) {
    c.problem(node, `image_resource of type ${type} needs source: with a repository`)
    return
  }
  if (!isMapping(sourceNode.value)) return
  const repository = c.child(sourceNode, "repository")
  if (repository === undefined) {
    c.problem(sourceNode, "source needs the image's repository, for example repository: busybox")
  } else if (c.string(repository) === "") {
    c.problem(repository, "must not be empty")
  }
  const tag = c.child(sourceNode, "tag")
  if (tag !== undefined) c.string(tag)
}

const memoryUnits: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1024,
  kb: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tb: 1024 ** 4,
  tib: 1024 ** 4,
}

/** `cpu` in shares; `memory` as bytes or with a unit (`512MB`, `1GB`, counted in 1024s as Concourse does). */
export function readContainerLimits(c: Checker, node: Node): ContainerLimits | undefined {
  if (c.mapping(node, "container_limits", ["cpu", "memory"]) === undefined) return undefined
  const cpuNode = c.child(node, "cpu")
  const cpu = cpuNode === undefined ? undefined : c.nonNegativeInteger(cpuNode)
  const memoryNode = c.child(node, "memory")
  let memoryBytes: number | undefined
  if (memoryNode !== undefined) {
    const value = memoryNode.value
    const match = typeof value === "string" ? /^(\d+(?:\.\d+)?)\s*([a-zA-Z]*)$/.exec(value.trim()) : null
    const unit = memoryUnits[match?.[2]?.toLowerCase() ?? "-"]
    if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) memoryBytes = value
    else if (match !== null && unit !== undefined) memoryBytes = Math.round(Number(match[1]) * unit)
    else c.problem(memoryNode, `must be a number of bytes or a size such as 512MB or 1GB, not ${describe(value)}`)
  }
  return { ...(cpu === undefined ? {} : { cpu }), ...(memoryBytes === undefined ? {} : { memoryBytes }) }
}

function readCaches(c: Checker, node: Node | undefined): { path: string }[] {
  if (node === undefined) return []
  return (c.list(node) ?? []).flatMap((entry) => {
    if (c.mapping(entry, "a cache", ["path"]) === undefined) return []
    const path = c.child(entry, "path")
    if (path === undefined) return c.problem(entry, "a cache needs a path") ?? []
    const text = c.string(path)
    return text === undefined ? [] : [{ path: text }]
  })
}

/** Entries of `inputs:` or `outputs:`, each a mapping with a name. */
function namedEntries(
  c: Checker,
  node: Node | undefined,
  what: string,
  keys: readonly string[],
): { entry: Node; name: string }[] {
  if (node === undefined) return []
  const seen = new Set<string>()
  return (c.list(node) ?? []).flatMap((entry) => {
    if (c.mapping(entry, `an ${what}`, keys) === undefined) return []
    const nameNode = c.child(entry, "name")
    if (nameNode === undefined) return c.problem(entry, `an ${what} needs a name`) ?? []
    const name = c.string(nameNode)
    if (name === undefined) return []
    if (name === "") return c.problem(nameNode, "must not be empty") ?? []
    if (seen.has(name) && !hasVariable(name)) return c.problem(nameNode, `${what} "${name}" is listed twice`) ?? []
    seen.add(name)
    return [{ entry, name }]
  })
}

function optionalString<K extends string>(c: Checker, node: Node | undefined, key: K): { [P in K]?: string } {
  if (node === undefined) return {}
  const text = c.string(node)
  return text === undefined ? {} : ({ [key]: text } as { [P in K]?: string })
}
