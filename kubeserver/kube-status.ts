/**
 * Kubernetes' error shape. Every refusal of the embedded API is a `Status`
 * object with the reason and HTTP code a real API server would give, so that
 * client-node, kubectl and the operator handle both servers the same way.
 * `KubeStatusError` is thrown by the resource layer; the HTTP handler is the
 * only place that turns it into a response.
 */

export type StatusCause = { readonly reason: string; readonly message: string; readonly field?: string }

export type StatusDetails = {
  readonly name?: string
  readonly group?: string
  readonly kind?: string
  readonly uid?: string
  readonly causes?: readonly StatusCause[]
  readonly retryAfterSeconds?: number
}

export type StatusReason =
  | "BadRequest"
  | "NotFound"
  | "AlreadyExists"
  | "Conflict"
  | "Invalid"
  | "Gone"
  | "Expired"
  | "UnsupportedMediaType"
  | "MethodNotAllowed"
  | "NotAcceptable"
  | "Forbidden"
  | "Unauthorized"
  | "TooManyRequests"
  | "RequestEntityTooLarge"
  | "InternalError"

export type KubeStatus = {
  kind: "Status"
  apiVersion: "v1"
  metadata: Record<string, never>
  status: "Failure" | "Success"
  message?: string
  reason?: StatusReason
  details?: StatusDetails
  code: number
}

export class KubeStatusError extends Error {
  readonly code: number
  readonly reason: StatusReason
  readonly details: StatusDetails | undefined
  constructor(code: number, reason: StatusReason, message: string, details?: StatusDetails) {
    super(message)
    this.name = "KubeStatusError"
    this.code = code
    this.reason = reason
    this.details = details
  }

  toStatus(): KubeStatus {
    const status: KubeStatus = {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      message: this.message,
      reason: this.reason,
      code: this.code,
    }
    if (this.details !== undefined) status.details = this.details
    return status
  }
}

/** A resource as Kubernetes names it in messages: `pipelines.runnel.dev`, or `secrets` for the core group. */
export type GroupResource = { readonly group: string; readonly resource: string }
/** A kind as Kubernetes names it in validation messages: `Pipeline.runnel.dev`, or `Secret`. */
export type GroupKind = { readonly group: string; readonly kind: string }

const groupResourceText = ({ group, resource }: GroupResource) => (group === "" ? resource : `${resource}.${group}`)
const groupKindText = ({ group, kind }: GroupKind) => (group === "" ? kind : `${kind}.${group}`)

export const notFound = (gr: GroupResource, name: string) =>
  new KubeStatusError(404, "NotFound", `${groupResourceText(gr)} "${name}" not found`, {
    name,
    group: gr.group,
    kind: gr.resource,
  })

/** The answer for a path that names nothing this server serves. */
export const pathNotFound = () =>
  new KubeStatusError(404, "NotFound", "the server could not find the requested resource", {})

export const alreadyExists = (gr: GroupResource, name: string) =>
  new KubeStatusError(409, "AlreadyExists", `${groupResourceText(gr)} "${name}" already exists`, {
    name,
    group: gr.group,
    kind: gr.resource,
  })

export const staleResourceVersionMessage =
  "the object has been modified; please apply your changes to the latest version and try again"

export const conflict = (gr: GroupResource, name: string, why: string) =>
  new KubeStatusError(409, "Conflict", `Operation cannot be fulfilled on ${groupResourceText(gr)} "${name}": ${why}`, {
    name,
    group: gr.group,
    kind: gr.resource,
  })

/** One field error, written as Kubernetes' `field.Error`: `path: Required value`, `path: Invalid value: ...`. */
export type FieldError = { readonly reason: FieldErrorReason; readonly field: string; readonly message: string }
export type FieldErrorReason =
  | "FieldValueRequired"
  | "FieldValueInvalid"
  | "FieldValueTypeInvalid"
  | "FieldValueNotSupported"
  | "FieldValueDuplicate"
  | "FieldValueForbidden"
  | "FieldValueTooLong"
  | "FieldValueTooMany"

export const fieldRequired = (field: string): FieldError => ({
  reason: "FieldValueRequired",
  field,
  message: "Required value",
})
export const fieldInvalid = (field: string, value: unknown, detail: string): FieldError => ({
  reason: "FieldValueInvalid",
  field,
  message: `Invalid value: ${shownValue(value)}: ${detail}`,
})
export const fieldForbidden = (field: string, detail: string): FieldError => ({
  reason: "FieldValueForbidden",
  field,
  message: `Forbidden: ${detail}`,
})

/** How Kubernetes quotes a value in a field error: strings quoted, objects and arrays by type. */
export function shownValue(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value)
  if (value === null) return "null"
  if (Array.isArray(value)) return `"array"`
  if (typeof value === "object") return `"object"`
  return String(value)
}

export function invalid(gk: GroupKind, name: string, errors: readonly FieldError[]) {
  const texts = errors.map((error) => `${error.field}: ${error.message}`)
  const joined = texts.length === 1 ? texts[0] : `[${texts.join(", ")}]`
  return new KubeStatusError(422, "Invalid", `${groupKindText(gk)} "${name}" is invalid: ${joined}`, {
    name,
    group: gk.group,
    kind: gk.kind,
    causes: errors.map(({ reason, message, field }) => ({ reason, message, field })),
  })
}

export const badRequest = (message: string) => new KubeStatusError(400, "BadRequest", message)

export const expired = (message: string) => new KubeStatusError(410, "Expired", message)

export const unsupportedMediaType = (contentType: string, accepted: readonly string[]) =>
  new KubeStatusError(
    415,
    "UnsupportedMediaType",
    `the body of the request was in an unknown format - accepted media types include: ${accepted.join(", ")}`,
    { causes: [{ reason: "UnexpectedServerResponse", message: `unsupported media type "${contentType}"` }] },
  )

export const methodNotAllowed = () =>
  new KubeStatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})

export const forbidden = (message: string) => new KubeStatusError(403, "Forbidden", message)

export const unauthorized = () => new KubeStatusError(401, "Unauthorized", "Unauthorized")

export const tooLarge = (limitBytes: number) =>
  new KubeStatusError(413, "RequestEntityTooLarge", `the request body is larger than ${limitBytes} bytes`)

export const internalError = (message: string) =>
  new KubeStatusError(500, "InternalError", `Internal error occurred: ${message}`, {
    causes: [{ reason: "UnexpectedServerResponse", message }],
  })

/** A Status that reports success, as Kubernetes answers a deletion of a kind that does not return the object. */
export function successStatus(details: StatusDetails) {
  return { kind: "Status", apiVersion: "v1", metadata: {}, status: "Success", details } as const
}
