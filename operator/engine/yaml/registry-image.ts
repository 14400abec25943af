import { SystemError } from "../../../lib/core/errors.ts"
import type { YamlMap } from "../../../lib/yaml/types.ts"

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
