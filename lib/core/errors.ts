/**
 * The one error type for mistakes a person can fix: bad input, unknown names,
 * missing files. `status` is the HTTP status the API server answers with and
 * `code` a stable word for tests and logs. The CLI prints the message alone,
 * never a stack trace.
 */
export class RunnelError extends Error {
  readonly status: number
  readonly code: string
  constructor(status: number, code: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = "RunnelError"
    this.status = status
    this.code = code
  }
}

export const badRequest = (message: string, options?: ErrorOptions) =>
  new RunnelError(400, "bad_request", message, options)
/** `pipeline "x" not found`, and `hint` after it when there is more to say. */
export const notFound = (what: string, key: string, hint?: string) =>
  new RunnelError(404, "not_found", `${what} "${key}" not found${hint === undefined ? "" : `: ${hint}`}`)

/**
 * A request for a feature this server was started without (`--allowed-features`):
 * 403, naming the feature and how to enable it. One constructor, so every route
 * that checks a feature says it the same way.
 */
export const featureDisabled = (feature: string) =>
  new RunnelError(
    403,
    "feature_disabled",
    `the "${feature}" feature is not enabled on this server; start it with --allowed-features naming ${feature}`,
  )

/** New work asked of a server that is shutting down: 503, to be tried again once it is back. */
export const shuttingDown = () =>
  new RunnelError(503, "shutting_down", "the server is shutting down and takes no new work; try again once it is back")

/**
 * runnel could not do its part of a run: the script does not compile, a secret
 * is missing, the driver is down, a sandbox limit was hit. A run that ends with
 * one is `error`, not `failure`: the pipeline's own logic did not fail.
 */
export class SystemError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = "SystemError"
  }
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
