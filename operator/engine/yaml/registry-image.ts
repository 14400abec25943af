import { SystemError } from "../../../lib/core/errors.ts"
import type { YamlMap } from "../../../lib/yaml/types.ts"

/**
 * An image a task runs in: its reference, and the env its metadata gives (a
 * mock's mirrored image carries MIRRORED_VERSION, concourse/mock-resource in).
 */
export type TaskImage = { readonly ref: string; readonly env: Readonly<Record<string, string>> }

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
