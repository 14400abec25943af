import { SystemError } from "../../../lib/core/errors.ts"
import type { YamlMap } from "../../../lib/yaml/types.ts"
import type { TaskRequest } from "../task-request.ts"
import type { MetadataField, Version } from "./versions.ts"

/**
 * Concourse's own resource types, which its workers carry and runnel pulls as
 * `concourse/<type>-resource` when the pipeline does not declare them.
 */
export const coreTypes = new Set([
  "git",
  "registry-image",
  "docker-image",
  "time",
  "s3",
  "semver",
  "github-release",
  "pool",
  "hg",
  "cf",
  "bosh-io-release",
  "bosh-io-stemcell",
  "tracker",
])

/**
 * The Concourse resource protocol (`/opt/resource/check`, `in`, `out`), run as
 * tasks in the resource type's image. Drivers give no stdin, so the JSON
 * request travels in an env var and a shell pipes it in; the answer is the
 * JSON the script prints last on stdout (resources log to stderr).
 */
export type ProtocolScript = "check" | "in" | "out"

export const requestEnv = "RUNNEL_RESOURCE_REQUEST"

export function protocolTask(
  image: string,
  script: ProtocolScript,
  request: unknown,
  dir: string,
  mounts: Readonly<Record<string, string>>,
): Omit<TaskRequest, "name"> {
  const target = script === "check" ? "" : ' "$1"'
  return {
    image,
    command: {
      path: "sh",
      args: ["-c", `printf '%s' "$${requestEnv}" | /opt/resource/${script}${target}`, "sh", dir],
    },
    env: { [requestEnv]: JSON.stringify(request) },
    mounts,
    workDir: dir,
  }
}

/** The JSON answer: the whole stdout, or failing that the last line-started JSON value in it. */
export function parseAnswer(stdout: string, script: ProtocolScript): unknown {
  const text = stdout.trim()
  try {
    return JSON.parse(text)
  } catch {
    const starts = [...text.matchAll(/(^|\n)[[{]/g)].map((match) => match.index + (match[1] ?? "").length).reverse()
    for (const start of starts) {
      try {
        return JSON.parse(text.slice(start))
      } catch {}
    }
  }
  throw new SystemError(`/opt/resource/${script} printed no JSON answer on stdout`)
}

/** The versions a check answered, oldest first. */
export function checkVersions(answer: unknown): Version[] {
  if (!Array.isArray(answer)) throw new SystemError("/opt/resource/check must answer a JSON list of versions")
  return answer.map(versionOf)
}

/** `{version, metadata}` of an in or out answer. */
export function fetchedVersion(
  answer: unknown,
  script: ProtocolScript,
): { version: Version; metadata: MetadataField[] } {
  if (typeof answer !== "object" || answer === null || !("version" in answer)) {
    throw new SystemError(`/opt/resource/${script} must answer {"version": {...}, "metadata": [...]}`)
  }
  const { version, metadata } = answer as { version: unknown; metadata?: unknown }
  const fields = Array.isArray(metadata)
    ? metadata.flatMap((field: unknown) =>
        typeof field === "object" && field !== null && "name" in field
          ? [{ name: String(field.name), value: "value" in field ? String(field.value) : "" }]
          : [],
      )
    : []
  return { version: versionOf(version), metadata: fields }
}

function versionOf(value: unknown): Version {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new SystemError(`a resource version must be an object of strings, not ${JSON.stringify(value)}`)
  }
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, String(item)]))
}

/** A resource type's source with its `defaults` under it, as Concourse merges them. */
export function withDefaults(source: YamlMap, defaults: YamlMap): YamlMap {
  return { ...defaults, ...source }
}
