import { parseDuration } from "../../lib/core/duration.ts"
import { badRequest } from "../../lib/core/errors.ts"

/** A task as a pipeline asks for it, checked; `mounts` maps container paths to volume names. */
export type TaskRequest = {
  readonly name: string
  readonly image: string
  readonly command: { readonly path: string; readonly args: readonly string[] }
  readonly env: Readonly<Record<string, string>>
  readonly mounts: Readonly<Record<string, string>>
  readonly workDir?: string
  readonly timeoutMs?: number
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
  }
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
