import type { Middleware } from "koa"
import { badRequest, RunnelError } from "../lib/core/errors.ts"

/**
 * Reads a JSON request body into `ctx.state.body` (undefined when empty),
 * refusing more than `maxBytes` with 413 and malformed JSON with a 400 that
 * says what is wrong. Bodies of GET, HEAD and DELETE are ignored.
 */
export function jsonBody(maxBytes: number): Middleware {
  return async (ctx, next) => {
    if (ctx.method === "POST" || ctx.method === "PUT" || ctx.method === "PATCH") {
      ctx.state.body = await read(ctx.req, ctx.get("Content-Length"), maxBytes)
    }
    await next()
  }
}

async function read(req: AsyncIterable<Buffer>, length: string, maxBytes: number): Promise<unknown> {
  const tooLarge = () =>
    new RunnelError(
      413,
      "too_large",
      `the request body is larger than ${maxBytes} bytes; the server's --max-body-mb sets the limit`,
    )
  if (length !== "" && Number(length) > maxBytes) throw tooLarge()
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req) {
    size += chunk.length
    if (size > maxBytes) throw tooLarge()
    chunks.push(chunk)
  }
  const text = Buffer.concat(chunks).toString("utf8")
  if (text.trim() === "") return undefined
  try {
    return JSON.parse(text)
  } catch (error) {
    throw badRequest(`the request body is not valid JSON: ${(error as Error).message}`)
  }
}

/** A JSON object body, or `{}` when the body may be empty. */
export function objectBody(body: unknown, { required }: { required: boolean }): Record<string, unknown> {
  if (body === undefined) {
    if (required) throw badRequest("the request body is empty; send a JSON object")
    return {}
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw badRequest(
      `the request body must be a JSON object, not ${Array.isArray(body) ? "an array" : JSON.stringify(body)}`,
    )
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
