import type { Middleware } from "koa"
import { errorMessage, RunnelError } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import { ApiException } from "../lib/kube/client-node.js"

/**
 * The one place that turns a failure into a response (STYLE.md section 4):
 * a RunnelError with its status, a Kubernetes API error with the status that
 * means the same to this API's client, anything else a 500 whose cause goes
 * to the log, never to the client. A request no route answered is a JSON 404.
 * Since every answer's status is settled here, `responded` (the metrics'
 * count by status class) hears each one, without a middleware of its own.
 */
export function errorRenderer(log: Log, responded?: (status: number) => void): Middleware {
  return async (ctx, next) => {
    try {
      await next()
      if (ctx.status === 404 && ctx.body == null) {
        throw new RunnelError(
          404,
          "no_route",
          `no route for ${ctx.method} ${ctx.path}; the API's routes are under /api/pipelines, /api/runs, /api/schedules, /api/features and /api/drivers`,
        )
      }
      // @koa/router's allowedMethods answers 405 for a method a path does not take, and 501 for
      // one no route of its router takes (PROPFIND, TRACE): both are a method this path does not answer.
      if ((ctx.status === 405 || ctx.status === 501) && ctx.body == null) {
        const allowed = ctx.response.get("Allow")
        if (allowed === "") {
          throw new RunnelError(
            404,
            "no_route",
            `no route for ${ctx.method} ${ctx.path}; the API answers GET, HEAD, PUT, POST and DELETE under /api/pipelines, /api/runs, /api/schedules, /api/features and /api/drivers`,
          )
        }
        throw new RunnelError(
          405,
          "method_not_allowed",
          `${ctx.path} does not answer ${ctx.method}; it answers ${allowed}`,
        )
      }
      if (ctx.status >= 400 && ctx.body == null) {
        throw new RunnelError(ctx.status, "http_error", `${ctx.method} ${ctx.path} failed: ${ctx.message}`)
      }
    } catch (error) {
      const { status, message } = responseOf(error, (cause) =>
        log("api.error", { method: ctx.method, path: ctx.path, error: cause }),
      )
      ctx.status = status
      // OAuth clients (runnel login) read the RFC 6749 code in `error`; people read the description.
      ctx.body = error instanceof OAuthError ? { error: error.code, error_description: message } : { error: message }
    } finally {
      responded?.(ctx.status)
    }
  }
}

/**
 * An error of an OAuth endpoint (the device grant's token poll, RFC 8628
 * section 3.5): answered as RFC 6749 section 5.2 says, `{"error": <code>,
 * "error_description": <message>}`, so that OAuth clients can tell
 * `authorization_pending` from `slow_down` and `expired_token`.
 */
export class OAuthError extends RunnelError {}

/**
 * The same judgement for MCP, which answers in JSON-RPC rather than HTTP: the
 * status and message a REST request would get, the cause of a 500 logged here.
 */
export function failureOf(error: unknown, log: Log, where: Readonly<Record<string, unknown>>) {
  return responseOf(error, (cause) => log("api.error", { ...where, error: cause }))
}

function responseOf(error: unknown, logCause: (cause: string) => void): { status: number; message: string } {
  if (error instanceof RunnelError) return { status: error.status, message: error.message }
  if (error instanceof ApiException) return kubeResponse(error.code, kubeMessage(error))
  const koaError = error as { status?: unknown; expose?: unknown; message?: unknown }
  if (typeof koaError.status === "number" && koaError.status < 500 && koaError.expose === true) {
    return { status: koaError.status, message: errorMessage(error) }
  }
  const code = (error as { code?: unknown }).code
  if (code === "ECONNREFUSED" || code === "ECONNRESET" || code === "ETIMEDOUT") {
    return { status: 503, message: `the Kubernetes API is unreachable: ${errorMessage(error)}; try again shortly` }
  }
  logCause(error instanceof Error ? (error.stack ?? error.message) : String(error))
  return { status: 500, message: "internal error; the server log has the details" }
}

/** What a Kubernetes API status means to a client of this API: its own mistakes keep their status. */
function kubeResponse(status: number, message: string): { status: number; message: string } {
  if (status === 400 || status === 422) return { status: 400, message }
  if (status === 404 || status === 409 || status === 413) return { status, message }
  return { status: 502, message: `the Kubernetes API answered ${status}: ${message}` }
}

/** The `message` of a Kubernetes Status body, else the exception's own text. */
function kubeMessage(error: ApiException<unknown>): string {
  const body = error.body
  try {
    const parsed: unknown = typeof body === "string" ? JSON.parse(body) : body
    const message = (parsed as { message?: unknown } | null)?.message
    if (typeof message === "string" && message !== "") return message
  } catch {
    // Not a Status: fall through.
  }
  return errorMessage(error)
}
