import { SystemError } from "../../../lib/core/errors.ts"
import type { YamlMap, YamlValue } from "../../../lib/yaml/types.ts"
import type { TaskRequest } from "../task-request.ts"
import type { TaskImage } from "./registry-image.ts"
import type { MetadataField, Version } from "./versions.ts"

/**
 * Concourse's mock resource (github.com/concourse/mock-resource), its version
 * logic in-process:
 * - check: `force_version` when set; else the version asked about (for runnel:
 *   the latest recorded); else `initial_version` (default `mock`) unless
 *   `no_initial_version`.
 * - get: writes `version` (the version and a newline) and the files of
 *   `create_files` and `create_files_via_params` (a string as it is, any
 *   other value as JSON) into the artifact; `mirror_self` (source) or
 *   `mirror_self_via_params` make the artifact an image, which for runnel is
 *   the mock image (Concourse copies the resource's own rootfs; runnel writes
 *   no rootfs/ and no metadata.json), with MIRRORED_VERSION in its env as the
 *   mock's metadata.json sets it. `print_metadata` prints the metadata.
 * - put: the version is `params.version` (Concourse's mock writes it even when
 *   empty; so does runnel); the metadata is the source's `metadata`.
 * - `log` (source): a message printed on stderr by every get and put.
 * Departures: `check_delay` and `check_failure` are ignored (there is no
 * separate check), and no `privileged` field is added to versions. runnel
 * also takes a get's `params.version` as the version to fetch.
 */
export const mockType = "mock"

export const defaultInitialVersion = "mock"

/**
 * The version a check of the mock would settle on, given the latest one known.
 * `mirrored` is the MIRRORED_VERSION of the image the check runs in (a
 * resource type's own version, when the type is a mock with mirror_self): the
 * mock takes it as its initial version when the source gives none.
 */
export function mockCheck(source: YamlMap, latest: Version | undefined, mirrored?: string): Version | undefined {
  const force = text(source.force_version)
  if (force !== undefined && force !== "") return { version: force }
  if (latest !== undefined) return latest
  if (source.no_initial_version === true) return undefined
  const initial = text(source.initial_version)
  return { version: initial === undefined || initial === "" ? (mirrored ?? defaultInitialVersion) : initial }
}

/** The image a mock with mirror_self gives: the mock image, with the version it was fetched at in its env. */
export function mirroredImage(mockImage: string, version: Version): TaskImage {
  return { ref: mockImage, env: { MIRRORED_VERSION: version.version ?? "" } }
}

/** The version a put of the mock creates. */
export function mockPutVersion(params: YamlMap): Version {
  return { version: text(params.version) ?? "" }
}

export function mockMetadata(source: YamlMap): MetadataField[] {
  const metadata = source.metadata
  if (!Array.isArray(metadata)) return []
  return metadata.flatMap((field: YamlValue) => {
    if (typeof field !== "object" || field === null || Array.isArray(field)) return []
    const entry = field as YamlMap
    const name = text(entry.name)
    return name === undefined ? [] : [{ name, value: text(entry.value) ?? "" }]
  })
}

export function mockMirrorsSelf(source: YamlMap, params: YamlMap): boolean {
  return source.mirror_self === true || params.mirror_self_via_params === true
}

/**
 * The task that fills a mock get's artifact, mounted as its working directory.
 * File paths and contents travel in env, so the script holds no pipeline text.
 */
export function mockGetTask(
  image: string,
  dir: string,
  volume: string,
  version: Version,
  source: YamlMap,
  params: YamlMap,
): Omit<TaskRequest, "name"> {
  const files = { ...mapping(source.create_files), ...mapping(params.create_files_via_params) }
  const env: Record<string, string> = { MOCK_VERSION: version.version ?? "" }
  let index = 0
  for (const [path, content] of Object.entries(files)) {
    if (path.split("/").includes("..") || path.startsWith("/")) {
      throw new SystemError(`mock create_files: "${path}" must be a relative path inside the artifact`)
    }
    env[`MOCK_FILE_PATH_${index}`] = path
    env[`MOCK_FILE_${index}`] = typeof content === "string" ? content : JSON.stringify(content)
    index++
  }
  env.MOCK_FILE_COUNT = String(index)
  const lines = [
    "set -e",
    ...logLine(source, env),
    `printf '%s\\n' "$MOCK_VERSION" > version`,
    "i=0",
    'while [ "$i" -lt "$MOCK_FILE_COUNT" ]; do',
    '  eval "p=\\"\\$MOCK_FILE_PATH_$i\\"; c=\\"\\$MOCK_FILE_$i\\""',
    '  mkdir -p "$(dirname "$p")"',
    `  printf '%s' "$c" > "$p"`,
    "  i=$((i + 1))",
    "done",
  ]
  if (params.print_metadata === true) {
    env.MOCK_METADATA = mockMetadata(source)
      .map((field) => `${field.name}: ${field.value}\n`)
      .join("")
    lines.push(`printf '%s' "$MOCK_METADATA"`)
  }
  return {
    image,
    command: { path: "sh", args: ["-c", lines.join("\n")] },
    env,
    mounts: { [dir]: volume },
    workDir: dir,
  }
}

/**
 * The task of a mock put: it only says what it pushes, as Concourse's mock does (and the metadata
 * with print_metadata, the source's `log` on stderr).
 */
export function mockPutTask(
  image: string,
  dir: string,
  version: Version,
  source: YamlMap,
  params: YamlMap,
): Omit<TaskRequest, "name"> {
  const printed =
    params.print_metadata === true
      ? mockMetadata(source)
          .map((field) => `${field.name}: ${field.value}\n`)
          .join("")
      : ""
  const env: Record<string, string> = { MOCK_VERSION: version.version ?? "", MOCK_METADATA: printed }
  const lines = [...logLine(source, env), `printf 'pushing version: %s\\n%s' "$MOCK_VERSION" "$MOCK_METADATA"`]
  return { image, command: { path: "sh", args: ["-c", lines.join("\n")] }, env, mounts: {}, workDir: dir }
}

/** The mock's `log` source field: a message it prints (on stderr) on every action, set in `env`. */
function logLine(source: YamlMap, env: Record<string, string>): string[] {
  const log = text(source.log)
  if (log === undefined || log === "") return []
  env.MOCK_LOG = log
  return [`printf '%s\\n' "$MOCK_LOG" >&2`]
}

function text(value: YamlValue | undefined): string | undefined {
  if (typeof value === "string") return value
  if (typeof value === "number" || typeof value === "boolean") return String(value)
  return undefined
}

function mapping(value: YamlValue | undefined): YamlMap {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as YamlMap) : {}
}
