import type { FieldError } from "./kube-status.ts"
import { isObject } from "./schema.ts"

const suffixes: Record<string, number> = {
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
  Ti: 1024 ** 4,
  Pi: 1024 ** 5,
  Ei: 1024 ** 6,
}

/**
 * A Kubernetes quantity ("512Mi", "500m", "2", "1.5") as a number; NaN for anything else. The
 * exponent forms Kubernetes also reads ("1e3") are not served.
 */
export function quantity(value: unknown): number {
  if (typeof value !== "string" && typeof value !== "number") return Number.NaN
  const match = /^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/.exec(String(value))
  if (match === null) return Number.NaN
  return Number(match[1]) * (match[2] === undefined ? 1 : (suffixes[match[2]] as number))
}

/** What Kubernetes says of a value that is not a quantity (it refuses the whole request as undecodable, 400). */
export const quantityPattern =
  "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

/**
 * Checks the resources of a Pod's containers as Kubernetes' validation does: the quantity of each
 * request and limit (returned as `undecodable`, which the API answers with 400), and no request
 * above its limit (422 field errors).
 */
export function podResourceErrors(spec: unknown): { undecodable: string | undefined; errors: FieldError[] } {
  const errors: FieldError[] = []
  const containers = isObject(spec) && Array.isArray(spec.containers) ? spec.containers : []
  for (const [index, container] of containers.entries()) {
    const resources = isObject(container) && isObject(container.resources) ? container.resources : {}
    const requests = isObject(resources.requests) ? resources.requests : {}
    const limits = isObject(resources.limits) ? resources.limits : {}
    for (const value of [...Object.values(requests), ...Object.values(limits)]) {
      if (Number.isNaN(quantity(value))) return { undecodable: quantityPattern, errors }
    }
    for (const [name, request] of Object.entries(requests)) {
      const limit = limits[name]
      if (limit !== undefined && quantity(request) > quantity(limit)) {
        errors.push({
          reason: "FieldValueInvalid",
          field: `spec.containers[${index}].resources.requests`,
          message: `Invalid value: "${String(request)}": must be less than or equal to ${name} limit of ${String(limit)}`,
        })
      }
    }
  }
  return { undecodable: undefined, errors }
}

/** Kubernetes' defaulting: a resource with a limit and no request is requested at its limit. */
export function defaultPodRequests(spec: unknown): void {
  const containers = isObject(spec) && Array.isArray(spec.containers) ? spec.containers : []
  for (const container of containers) {
    if (!isObject(container) || !isObject(container.resources) || !isObject(container.resources.limits)) continue
    const requests = isObject(container.resources.requests) ? container.resources.requests : {}
    container.resources.requests = { ...container.resources.limits, ...requests }
  }
}
