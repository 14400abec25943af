import type { Middleware } from "koa"
import { badRequest, RunnelError } from "../lib/core/errors.ts"

/** JSON nested deeper than this is refused: no field of the API nests more than a few levels. */
export const maxJsonDepth = 64

/**
 * Reads a JSON request body into `ctx.state.body` (undefined when empty),
 * refusing more than `maxBytes` with 413, a body sent as another media type
 * than JSON with 415, and malformed or too deeply nested JSON with a 400 that
 * says what is wrong. Bodies of GET, HEAD and DELETE are ignored.
 */
export function jsonBody(maxBytes: number): Middleware {
  return async (ctx, next) => {
    // Webhooks take any body in any media type, read raw by their route: signatures are over the bytes.
    const raw = ctx.path.startsWith("/api/webhooks/")
    if (!raw && (ctx.method === "POST" || ctx.method === "PUT" || ctx.method === "PATCH")) {
      const bytes = await rawBody(ctx.req, ctx.get("Content-Length"), maxBytes)
      ctx.state.body = parseJson(
        bytes,
        ctx.get("Content-Type"),
        expectedBodies.find(([path]) => path.test(ctx.path))?.[1],
      )
    }
    await next()
  }
}

/** What a few small bodies must be, said after a body that is not JSON at all, so the message names the field. */
const expectedBodies: readonly (readonly [RegExp, string])[] = [
  [/^\/api\/schedules\/[^/]+\/enabled$/, '; send {"enabled": true} or {"enabled": false}'],
]

/** `application/json`, `application/<anything>+json`, or no Content-Type at all (taken as JSON). */
function isJsonMediaType(contentType: string): boolean {
  const mediaType = (contentType.split(";")[0] ?? "").trim().toLowerCase()
  return mediaType === "" || mediaType === "application/json" || /^application\/[^/]+\+json$/.test(mediaType)
}

/** The request body's bytes, refusing more than `maxBytes` (413) before reading them when Content-Length says so. */
export async function rawBody(req: AsyncIterable<Buffer>, length: string, maxBytes: number): Promise<Buffer> {
  const tooLarge = () =>
    new RunnelError(
      413,
      "too_large",
      `the request body is larger than ${maxBytes} bytes; the server's --max-body-mb sets the limit`,
    )
  // A body a little over the limit is read to its end and dropped before the 413, so the client
  // gets the answer: closing a socket with unread bytes resets it, and the reset can destroy the
  // answer before the client reads it. A much larger one is refused at once.
  const drainLimit = maxBytes * 4
  if (length !== "" && Number(length) > drainLimit) throw tooLarge()
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req) {
    size += chunk.length
    if (size > drainLimit) throw tooLarge()
    if (size <= maxBytes) chunks.push(chunk)
  }
  if (size > maxBytes) throw tooLarge()
  return Buffer.concat(chunks)
}

function parseJson(bytes: Buffer, contentType: string, expected = ""): unknown {
  const text = bytes.toString("utf8")
  if (text.trim() === "") return undefined
  if (!isJsonMediaType(contentType)) {
    throw new RunnelError(
      415,
      "unsupported_media_type",
      `the request body is sent as ${JSON.stringify(contentType)}; this API takes JSON: send it with Content-Type: application/json`,
    )
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (error) {
    throw badRequest(`the request body is not valid JSON: ${(error as Error).message}${expected}`)
  }
  if (depthExceeds(parsed, maxJsonDepth)) {
    throw badRequest(`the request body nests arrays and objects more than ${maxJsonDepth} levels deep`)
  }
  return parsed
}

/** Whether `value` nests arrays and objects more than `max` levels deep; iterative, so any depth is safe to ask about. */
function depthExceeds(value: unknown, max: number): boolean {
  const pending: [unknown, number][] = [[value, 0]]
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth] = next
    if (item === null || typeof item !== "object") continue
    if (depth + 1 > max) return true
    for (const child of Object.values(item)) pending.push([child, depth + 1])
  }
  return false
}

/** What a JSON value is, for messages: never the value itself, which may be large. */
function jsonKind(value: unknown): string {
  if (value === null) return "null"
  if (Array.isArray(value)) return "an array"
  return `a ${typeof value}`
}

/** A JSON object body, or `{}` when the body may be empty. */
export function objectBody(body: unknown, { required }: { required: boolean }): Record<string, unknown> {
  if (body === undefined) {
    if (required) throw badRequest("the request body is empty; send a JSON object")
    return {}
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw badRequest(`the request body must be a JSON object, not ${jsonKind(body)}`)
  }
  return body as Record<string, unknown>
}

/** Refuses fields not in `known`, naming them and the known ones. */
export function onlyFields(body: Record<string, unknown>, known: readonly string[]): void {
  const unknown = Object.keys(body).filter((key) => !known.includes(key))
  if (unknown.length > 0) {
    throw badRequest(
      `unknown field${unknown.length > 1 ? "s" : ""} ${unknown.map((key) => `"${key}"`).join(", ")}; known: ${known.join(", ")}`,
    )
  }
}

/**
 * A form body (`application/x-www-form-urlencoded`), as browsers post forms
 * and OAuth clients post to token endpoints (RFC 6749); an empty body is an
 * empty form. Another media type is a 415 that says what to send.
 */
export async function formBody(
  req: AsyncIterable<Buffer>,
  headers: { contentLength: string; contentType: string },
  maxBytes: number,
): Promise<URLSearchParams> {
  const text = (await rawBody(req, headers.contentLength, maxBytes)).toString("utf8")
  const mediaType = (headers.contentType.split(";")[0] ?? "").trim().toLowerCase()
  if (text !== "" && mediaType !== "application/x-www-form-urlencoded") {
    throw new RunnelError(
      415,
      "unsupported_media_type",
      `the request body is sent as ${JSON.stringify(headers.contentType)}; this endpoint takes a form: send it with Content-Type: application/x-www-form-urlencoded`,
    )
  }
  return new URLSearchParams(text)
}
