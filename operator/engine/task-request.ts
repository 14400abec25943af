import { parseDuration } from "../../lib/core/duration.ts"
import { badRequest } from "../../lib/core/errors.ts"
import type { TaskResources } from "../drivers/driver.ts"

/** A task as a pipeline asks for it, checked; `mounts` maps container paths to volume names. */
export type TaskRequest = {
  readonly name: string
  readonly image: string
  readonly command: { readonly path: string; readonly args: readonly string[] }
  readonly env: Readonly<Record<string, string>>
  readonly mounts: Readonly<Record<string, string>>
  readonly workDir?: string
  readonly timeoutMs?: number
  readonly resources?: TaskResources
  readonly privileged?: boolean
}

const taskNamePattern = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/

/**
 * Checks what a pipeline passed to `runtime.run` (or a YAML step built) and
 * says exactly what is wrong, so the author can fix it from the message.
 */
export function parseTaskRequest(value: unknown): TaskRequest {
  if (!isObject(value)) throw badRequest("runtime.run: pass a task object: { name, image, command: { path, args } }")
  const name = value.name
  if (typeof name !== "string" || !taskNamePattern.test(name)) {
    throw badRequest(
      `runtime.run: task name ${show(name)} is not valid; use letters, digits, ".", "_" and "-" (at most 128), for example name: "build"`,
    )
  }
  const where = `runtime.run: task "${name}"`
  if (typeof value.image !== "string" || value.image === "") {
    throw badRequest(`${where} has no image; set image, for example image: "busybox"`)
  }
  const command = value.command
  if (!isObject(command) || typeof command.path !== "string" || command.path === "") {
    throw badRequest(`${where} has no command; set command: { path: "sh", args: ["-c", "echo hello"] }`)
  }
  const args = command.args ?? []
  if (!Array.isArray(args) || !args.every((arg) => typeof arg === "string")) {
    throw badRequest(`${where}: command.args must be a list of strings`)
  }
  return {
    name,
    image: value.image,
    command: { path: command.path, args },
    env: stringMap(value.env, `${where}: env`),
    mounts: stringMap(value.mounts, `${where}: mounts`),
    ...(value.workDir === undefined ? {} : { workDir: absolutePath(value.workDir, `${where}: workDir`) }),
    ...(value.timeout === undefined ? {} : { timeoutMs: timeout(value.timeout, where) }),
    ...(value.resources === undefined ? {} : { resources: resources(value.resources, where) }),
    ...(value.privileged === undefined ? {} : { privileged: privileged(value.privileged, where) }),
  }
}

/** Kubernetes' quantity suffixes for memory: decimal (k, M, G, T) and binary (Ki, Mi, Gi, Ti). */
const memorySuffixes: Record<string, number> = {
  "": 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
  Ti: 1024 ** 4,
}

/**
 * `resources: { cpu, memory }` as Kubernetes writes them: cpu a number of CPUs (`0.5`, `2`) or a
 * quantity (`"500m"`, `"2"`), memory a number of bytes or a quantity (`"256Mi"`, `"1Gi"`, `"500M"`).
 */
function resources(value: unknown, where: string): TaskResources {
  const example = 'for example resources: { cpu: "500m", memory: "256Mi" }'
  if (!isObject(value)) throw badRequest(`${where}: resources must be an object, ${example}`)
  const unknown = Object.keys(value).filter((key) => key !== "cpu" && key !== "memory")
  if (unknown.length > 0) {
    throw badRequest(`${where}: resources takes cpu and memory, not ${unknown.join(", ")}; ${example}`)
  }
  const parsed: { cpuMillis?: number; memoryBytes?: number } = {}
  if (value.cpu !== undefined) {
    const text = String(value.cpu)
    const match = /^(\d+(?:\.\d+)?)(m?)$/.exec(text)
    const millis = match === null ? Number.NaN : Number(match[1]) * (match[2] === "m" ? 1 : 1000)
    if (!(typeof value.cpu === "number" || typeof value.cpu === "string") || !(millis >= 1)) {
      throw badRequest(
        `${where}: resources.cpu is ${show(value.cpu)}; give CPUs as a number or a quantity of at least "1m", such as 0.5, "500m" or "2"`,
      )
    }
    parsed.cpuMillis = Math.ceil(millis)
  }
  if (value.memory !== undefined) {
    const match = typeof value.memory === "string" ? /^(\d+(?:\.\d+)?)([kMGT]|[KMGT]i)?$/.exec(value.memory) : null
    const bytes =
      typeof value.memory === "number"
        ? value.memory
        : match === null
          ? Number.NaN
          : Number(match[1]) * (memorySuffixes[match[2] ?? ""] as number)
    if (!Number.isFinite(bytes) || bytes < 1 || (typeof value.memory === "number" && !Number.isInteger(bytes))) {
      throw badRequest(
        `${where}: resources.memory is ${show(value.memory)}; give bytes as a whole number or a quantity such as "256Mi" or "1Gi"`,
      )
    }
    parsed.memoryBytes = Math.ceil(bytes)
  }
  return parsed
}

function privileged(value: unknown, where: string): boolean {
  if (typeof value !== "boolean") throw badRequest(`${where}: privileged is ${show(value)}; write true or false`)
  return value
}

function stringMap(value: unknown, what: string): Record<string, string> {
  if (value === undefined || value === null) return {}
  if (!isObject(value)) throw badRequest(`${what} must be an object of strings`)
  for (const [key, item] of Object.entries(value)) {
    if (typeof item !== "string") {
      throw badRequest(
        `${what}.${key} is ${show(item)}, not a string; write it as a string, for example "${String(item)}"`,
      )
    }
  }
  return value as Record<string, string>
}

function absolutePath(value: unknown, what: string): string {
  if (typeof value !== "string" || !value.startsWith("/")) {
    throw badRequest(`${what} must be an absolute path, for example "/src"`)
  }
  return value
}

function timeout(value: unknown, where: string): number {
  if (typeof value !== "string") throw badRequest(`${where}: timeout must be a duration string, for example "30s"`)
  try {
    return parseDuration(value)
  } catch (error) {
    throw badRequest(`${where}: ${(error as Error).message}`)
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value)
}

function show(value: unknown): string {
  return value === undefined
    ? "missing"
    : `${JSON.stringify(value)} (${Array.isArray(value) ? "a list" : typeof value})`
}
