import { EventEmitter } from "node:events"
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http"
import type { ApiRequest, ApiResponse } from "../kubeserver/http-exchange.ts"
import type { KubeConfig } from "../lib/kube/client-node.js"

/**
 * `runnel server`'s roles reach the embedded API in their own process
 * without a socket and without HTTP's framing: client-node's requests (its
 * API clients, its watches) are handed to `handle`, the embedded API's
 * handler, as request and response objects of their own. The same
 * Kubernetes protocol runs (paths, verbs, the bearer token, status codes,
 * JSON bodies, watch streams of JSON lines) and the same handler serves it
 * as over TCP; what is skipped is what only a wire needs: writing and
 * parsing HTTP/1.1 on both sides, chunked encoding of watches, and the
 * streams between them (about 12% of the main thread under the webhook
 * benchmark, as a pipe with node:http on both ends).
 *
 * client-node 2 sends every request with undici's fetch through the
 * `dispatcher` that KubeConfig.applySecurityAuthentication sets on it; here
 * that is one dispatcher speaking undici's handler protocol (onRequestStart,
 * onResponseStart, onResponseData, onResponseEnd, onResponseError, a
 * controller with abort/pause/resume). Exactly one of onResponseEnd and
 * onResponseError ends each exchange, as undici promises; a client's abort
 * (an aborted watch) closes the response, so that the embedded API forgets
 * the watcher at once.
 *
 * Other users of the kubeconfig (the kubernetes driver's streamed Pod logs)
 * keep its URL and reach the same API over TCP.
 */
export function inProcessTransport(
  kubeConfig: KubeConfig,
  token: string,
  handle: (req: ApiRequest, res: ApiResponse) => boolean,
): void {
  const dispatcher = {
    dispatch: (options: DispatchOptions, handler: ResponseHandler) => send(handle, options, handler),
  }
  kubeConfig.applySecurityAuthentication = async (context) => {
    context.setHeaderParam("Authorization", `Bearer ${token}`)
    context.setDispatcher(dispatcher as unknown as Parameters<typeof context.setDispatcher>[0])
  }
}

/** The part of undici's dispatch options that fetch sets. */
type DispatchOptions = {
  path: string
  method: string
  /** As fetch gives them: names as the caller wrote them, a repeated header as an array. */
  headers?: Record<string, string | string[]> | null
  body?: string | Uint8Array | AsyncIterable<Uint8Array> | null
}

type Controller = {
  abort(reason: Error): void
  pause(): void
  resume(): void
  readonly aborted: boolean
  /** fetch reads the response's headers from here, as undici's parser gives them: names and values as Buffers. */
  readonly rawHeaders: Buffer[]
}

/** undici's handler protocol (v7 and later), as fetch implements it. */
type ResponseHandler = {
  onRequestStart?(controller: Controller, context: object): void
  onResponseStarted?(): void
  onResponseStart?(controller: Controller, status: number, headers: IncomingHttpHeaders, statusText: string): void
  onResponseData?(controller: Controller, chunk: Buffer): void
  onResponseEnd?(controller: Controller, trailers: IncomingHttpHeaders): void
  onResponseError?(controller: Controller, error: Error): void
}

function send(
  handle: (req: ApiRequest, res: ApiResponse) => boolean,
  options: DispatchOptions,
  handler: ResponseHandler,
): boolean {
  const response = new InProcessResponse(handler)
  handler.onRequestStart?.(response.controller, {})
  if (response.closed) return true // aborted before it started
  const request: ApiRequest = {
    method: options.method,
    url: options.path,
    headers: incomingHeaders(options.headers),
    socket: {},
    [Symbol.asyncIterator]: () => chunksOf(options.body),
  }
  try {
    if (!handle(request, response)) {
      response.writeHead(404, { "content-type": "text/plain" })
      response.end(`no route for ${request.method} ${request.url}\n`)
    }
  } catch (error) {
    response.fail(error instanceof Error ? error : new Error(String(error)))
  }
  return true
}

/** Headers as node:http gives a server them: lower-case names, a repeated header's values joined with ", ". */
function incomingHeaders(headers: DispatchOptions["headers"]): IncomingHttpHeaders {
  const incoming: IncomingHttpHeaders = {}
  for (const [name, value] of Object.entries(headers ?? {}))
    incoming[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value
  return incoming
}

async function* chunksOf(body: DispatchOptions["body"]): AsyncGenerator<Uint8Array> {
  if (body === null || body === undefined) return
  if (typeof body === "string") yield Buffer.from(body)
  else if (body instanceof Uint8Array) yield body
  else yield* body
}

/**
 * The embedded API's side of one exchange: what it writes goes straight to
 * fetch's handler. fetch's pause() is recorded, not obeyed: the embedded API
 * writes a watch's events without waiting for its reader (as into a socket,
 * whose buffer grows the same way), and fetch keeps what it was handed until
 * it is read.
 */
class InProcessResponse extends EventEmitter implements ApiResponse {
  headersSent = false
  readonly controller: Controller
  readonly #handler: ResponseHandler
  #state: "open" | "ended" | "failed" = "open"
  #aborted = false
  #rawHeaders: Buffer[] = []

  constructor(handler: ResponseHandler) {
    super()
    this.#handler = handler
    const response = this
    this.controller = {
      abort(reason) {
        response.#aborted = true
        response.fail(reason)
      },
      pause() {},
      resume() {},
      get aborted() {
        return response.#aborted
      },
      get rawHeaders() {
        return response.#rawHeaders
      },
    }
  }

  get closed(): boolean {
    return this.#state !== "open"
  }

  writeHead(status: number, headers: OutgoingHttpHeaders = {}): this {
    if (this.headersSent || this.closed) return this
    this.headersSent = true
    const incoming: IncomingHttpHeaders = {}
    for (const [name, value] of Object.entries(headers)) {
      if (value === undefined) continue
      const lower = name.toLowerCase()
      const values = Array.isArray(value) ? value : [String(value)]
      incoming[lower] = values.join(", ")
      for (const each of values) this.#rawHeaders.push(Buffer.from(lower, "latin1"), Buffer.from(each, "latin1"))
    }
    this.#deliver(() => {
      this.#handler.onResponseStarted?.()
      this.#handler.onResponseStart?.(this.controller, status, incoming, "")
    })
    return this
  }

  /** The headers are delivered as they are written: there is no buffer to flush. */
  flushHeaders(): void {}

  write(chunk: string | Uint8Array): boolean {
    if (!this.headersSent) this.writeHead(200)
    if (this.closed) return false
    const bytes =
      typeof chunk === "string" ? Buffer.from(chunk) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length)
    if (bytes.length > 0) this.#deliver(() => this.#handler.onResponseData?.(this.controller, bytes))
    return true
  }

  end(chunk?: string | Uint8Array): this {
    if (chunk !== undefined) this.write(chunk)
    else if (!this.headersSent) this.writeHead(200)
    if (this.closed) return this
    this.#state = "ended"
    this.#handler.onResponseEnd?.(this.controller, {})
    this.#closeSoon()
    return this
  }

  destroy(): this {
    this.fail(new Error("the embedded API closed the response before its end"))
    return this
  }

  /** Ends the exchange with an error, once: the client's abort, the handler's destroy(), or a throw. */
  fail(error: Error): void {
    if (this.closed) return
    this.#state = "failed"
    this.#handler.onResponseError?.(this.controller, error)
    this.#closeSoon()
  }

  /** fetch's handler throwing is the exchange's failure, not the embedded API's (which may be telling its watchers). */
  #deliver(call: () => void): void {
    try {
      call()
    } catch (error) {
      this.fail(error instanceof Error ? error : new Error(String(error)))
    }
  }

  /** As node:http's response, `close` comes after the end, never inside the call that ended it. */
  #closeSoon(): void {
    process.nextTick(() => this.emit("close"))
  }
}
