import { parse as parseYaml } from "yaml"

export type ContentType = "ts" | "js" | "yaml"

/**
 * The content type of a pipeline stored without one (contract.md section 4):
 * content that parses as a YAML mapping with a `jobs` list is yaml, anything
 * else ts. The API server and the operator both ask, so it lives here once.
 */
export function inferContentType(content: string): ContentType {
  try {
    const parsed: unknown = parseYaml(content)
    if (parsed !== null && typeof parsed === "object" && Array.isArray((parsed as { jobs?: unknown }).jobs)) {
      return "yaml"
    }
  } catch {
    // Not YAML at all: a script.
  }
  return "ts"
}

/**
 * The content type of a pipeline: its `contentType`, else inferred from its
 * content as above.
 */
export function contentTypeOf(spec: { readonly content: string; readonly contentType?: ContentType }): ContentType {
  return spec.contentType ?? inferContentType(spec.content)
}
