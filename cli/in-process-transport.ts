import { once } from "node:events"
import { createServer, type IncomingHttpHeaders, type IncomingMessage, request, type ServerResponse } from "node:http"
import { duplexPair } from "node:stream"
import type { KubeConfig } from "../lib/kube/client-node.js"

/**
 * `runnel server`'s roles reach the embedded API in their own process without
 * a socket: client-node's requests (its API clients, its watches) go over an
 * in-memory pipe to an HTTP server that hands them to `handle`, the embedded
 * API's handler, as over loopback TCP: the same Kubernetes protocol (HTTP/1.1,
 * the same bearer token, streamed watch responses), minus the kernel's TCP
 * connect, buffering and close per request.
 *
 * client-node 2 sends every request with undici's fetch through the
 * `dispatcher` that KubeConfig.applySecurityAuthentication sets on it. Over
 * loopback that was a new undici Agent, and so a new TCP connection, per
 * request (skipTLSVerify makes client-node build one per call); here it is
 * one dispatcher speaking undici's handler protocol (onRequestStart,
 * onResponseStart, onResponseData, onResponseEnd, onResponseError, a
 * controller with abort/pause/resume) on top of node:http over a duplex pair.
 * Each request has a pipe of its own (opening one costs no system call), so
 * an aborted watch ends only its own. When the exchange is over, whichever
 * way, both ends of the pipe are destroyed: unlike a socket's, a pipe's end
 * learns nothing of the other's destruction, and a watch's response on the
 * server's end closes (and the embedded API forgets the watcher) only when
 * its own end does. The request asks for keep-alive so that neither side
 * ends the pipe by itself meanwhile: after a `Connection: close` response,
 * Node's server ended its end, then ended it again when the client ended
 * its own, building an ERR_STREAM_ALREADY_FINISHED per request (about 1%
 * of the main thread under the webhook benchmark).
 *
 * Other users of the kubeconfig (the kubernetes driver's streamed Pod logs)
 * keep its URL and reach the same API over TCP.
 */
export function inProcessTransport(
  kubeConfig: KubeConfig,
  token: string,
  handle: (req: IncomingMessage, res: ServerResponse) => boolean,
): void {
  const server = createServer((req, res) => {
    if (handle(req, res)) return
    res.writeHead(404, { "Content-Type": "text/plain" }).end(`no route for ${req.method} ${req.url}\n`)
  })
  const dispatcher = {
    dispatch: (options: DispatchOptions, handler: ResponseHandler) => send(server, options, handler),
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
  headers?: Record<string, string> | null
  body?: string | Uint8Array | AsyncIterable<Uint8Array> | null
}

type Controller = {
  abort(reason: Error): void
  pause(): void
  resume(): void
  readonly aborted: boolean
  readonly paused: boolean
  readonly reason: Error | null
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

function send(server: ReturnType<typeof createServer>, options: DispatchOptions, handler: ResponseHandler): boolean {
  const [client, serverEnd] = duplexPair()
  server.emit("connection", serverEnd)
  const req = request({
    createConnection: () => client,
    method: options.method,
    path: options.path,
    headers: { ...options.headers, connection: "keep-alive" },
  })
  const close = () => {
    client.destroy()
    serverEnd.destroy()
  }
  let response: IncomingMessage | undefined
  let settled = false
  let paused = false
  let reason: Error | null = null
  // Exactly one of onResponseEnd and onResponseError, as undici promises.
  const fail = (error: Error) => {
    if (settled) return
    settled = true
    req.destroy()
    close()
    handler.onResponseError?.(controller, error)
  }
  const controller: Controller = {
    abort(why) {
      if (settled) return
      reason = why
      fail(why)
    },
    pause() {
      paused = true
      response?.pause()
    },
    resume() {
      paused = false
      response?.resume()
    },
    get aborted() {
      return reason !== null
    },
    get paused() {
      return paused
    },
    get reason() {
      return reason
    },
    get rawHeaders() {
      return (response?.rawHeaders ?? []).map((text) => Buffer.from(text, "latin1"))
    },
  }
  req.on("error", fail)
  req.on("response", (res) => {
    response = res
    handler.onResponseStarted?.()
    handler.onResponseStart?.(controller, res.statusCode ?? 500, res.headers, res.statusMessage ?? "")
    if (settled) return
    res.on("data", (chunk: Buffer) => {
      if (!settled) handler.onResponseData?.(controller, chunk)
    })
    if (paused) res.pause()
    res.on("end", () => {
      if (settled) return
      settled = true
      close()
      handler.onResponseEnd?.(controller, res.trailers)
    })
    res.on("error", fail)
    res.on("close", () => fail(new Error("the embedded API closed the response before its end")))
  })
  handler.onRequestStart?.(controller, {})
  if (!settled) void writeBody(req, options.body).catch(fail)
  return true
}

async function writeBody(req: ReturnType<typeof request>, body: DispatchOptions["body"]): Promise<void> {
  if (body === null || body === undefined || typeof body === "string" || body instanceof Uint8Array) {
    req.end(body ?? undefined)
    return
  }
  for await (const chunk of body) {
    if (!req.write(chunk)) await once(req, "drain")
  }
  req.end()
}
