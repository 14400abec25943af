import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https"
import { type AddressInfo, createServer as createNetServer, type Server as NetServer, type Socket } from "node:net"
import { isUiPath } from "../apiserver/ui/ui-paths.ts"
import { badRequest, errorMessage, SystemError } from "../lib/core/errors.ts"

// The HTTP front of the serving commands (`runnel server`, `runnel apiserver`): listening, closing, the
// probes and the gate that keeps the API shut until it is up. It lives in cli/, not lib/, because only
// these two composition commands use it, and it speaks their language (--port, --host, what the process
// answers); the API server and the embedded API are node:http handlers mounted behind it.

export type Handler = (req: IncomingMessage, res: ServerResponse) => void

/**
 * Where a serving process is in its life, as its probes say:
 * - `starting`: it listens (so the embedded API answers and the operator can reach it) while the stores,
 *   the operator and the API open. /livez 200; /readyz and /health 503 `{"status":"starting"}`; every
 *   /api request 503 with Retry-After and a JSON error saying the server is starting.
 * - `ready`: /livez, /readyz and /health 200 `{"status":"ok"}`; /api is the API.
 * - `draining`: shutting down. /readyz and /health 503 `{"status":"shutting down"}` so that traffic
 *   stops coming; /livez still 200 (restarting would not help); /api is still the API, which refuses
 *   new work itself and keeps answering reads and stops.
 */
export type Phase = "starting" | "ready" | "draining"

export type HttpFront = {
  /** What listens: an HTTP server, an HTTPS server, or both behind one port (see `tls`). */
  readonly http: NetServer
  /** `https` when every request comes over TLS, `http` when plain HTTP is served (alone or beside TLS). */
  readonly scheme: "http" | "https"
  readonly phase: Phase
  /** The API is up: /api reaches `api`, and the probes say ready. */
  ready(api: Handler): void
  /** The process shuts down: the probes say so; the API keeps its requests. */
  drain(): void
  /** Stops listening and ends every connection, keep-alive ones included. */
  close(): Promise<void>
}

/** TLS for the front: a PEM certificate (chain) and key; `besidePlainHttp` serves plain HTTP on the same port too. */
export type FrontTls = { readonly cert: string; readonly key: string; readonly besidePlainHttp: boolean }

const probes = new Set(["/livez", "/readyz", "/health"])

/**
 * A node:http server for a serving command: `routes` first (the embedded API
 * answers its own paths and returns true), then the probes, then the API under
 * /api, the login under /auth, MCP at /mcp and the web UI's pages and assets once ready; anything else is a
 * JSON 404 listing what it `serves`
 * besides the probes and the API. Requests node:http refuses itself are
 * answered in JSON too (answerClientErrors).
 */
export function httpFront(
  options: {
    routes?: (req: IncomingMessage, res: ServerResponse) => boolean
    serves?: readonly string[]
    tls?: FrontTls | undefined
  } = {},
): HttpFront {
  let phase: Phase = "starting"
  let api: Handler | undefined
  const serves = [
    "/livez, /readyz and /health",
    "the REST API under /api",
    "MCP at POST /mcp",
    "the login under /auth",
    "the web UI at /",
    ...(options.serves ?? []),
  ].join(", ")
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    if (options.routes?.(req, res)) return
    const path = (req.url ?? "/").split("?")[0] ?? "/"
    if (probes.has(path)) {
      probe(req, res, path, phase)
    } else if (!/^\/(api|auth)(\/|$)/.test(path) && path !== "/mcp" && !isUiPath(path)) {
      send(res, 404, { error: `no route for ${req.method} ${path}; this server answers ${serves}` })
    } else if (api === undefined) {
      // Before the API is mounted a request would meet no route (404) or half-open stores: say "not yet".
      res.setHeader("Retry-After", "1")
      send(res, 503, {
        error:
          "the server is starting and takes no requests yet; try again in a second (GET /readyz answers 200 once it is ready)",
      })
    } else {
      api(req, res)
    }
  }
  const { tls } = options
  const plain = tls === undefined || tls.besidePlainHttp ? createServer(handler) : undefined
  const secure = tls === undefined ? undefined : createHttpsServer({ cert: tls.cert, key: tls.key }, handler)
  const servers = [plain, secure].filter((server) => server !== undefined)
  for (const server of servers) answerClientErrors(server)
  const both = plain !== undefined && secure !== undefined ? eitherProtocol(plain, secure) : undefined
  const http: NetServer = both?.server ?? plain ?? (secure as NetServer)
  return {
    http,
    scheme: plain === undefined ? "https" : "http",
    get phase() {
      return phase
    },
    ready(handler) {
      api = handler
      if (phase === "starting") phase = "ready"
    },
    drain() {
      phase = "draining"
    },
    close() {
      return new Promise((resolve) => {
        if (!http.listening) {
          resolve()
          return
        }
        http.close(() => resolve())
        both?.endUndecided()
        for (const server of servers) server.closeAllConnections()
      })
    },
  }
}

/**
 * Plain HTTP and TLS on one port: a TLS connection opens with a handshake
 * record (content type 22, byte 0x16), an HTTP/1.1 one with a method name in
 * ASCII, so the first byte says which server the connection is handed to.
 * `endUndecided` ends the connections that have not sent that byte yet (the
 * inner servers end the others).
 */
function eitherProtocol(plain: Server, secure: HttpsServer): { server: NetServer; endUndecided(): void } {
  const undecided = new Set<Socket>()
  const server = createNetServer((socket) => {
    undecided.add(socket)
    socket.once("close", () => undecided.delete(socket))
    // A connection that never says anything is ended as node:http ends one that never sends its headers.
    const silent = () => socket.destroy()
    socket.setTimeout(plain.headersTimeout, silent)
    socket.once("readable", () => {
      undecided.delete(socket)
      socket.setTimeout(0).off("timeout", silent)
      const first = socket.read(1) as Buffer | null
      if (first === null) {
        socket.destroy()
        return
      }
      socket.unshift(first)
      ;(first[0] === 0x16 ? secure : plain).emit("connection", socket)
    })
  })
  return {
    server,
    endUndecided() {
      for (const socket of undecided) socket.destroy()
    },
  }
}

/** /livez, /readyz and /health, as the phase says; GET and HEAD only. */
function probe(req: IncomingMessage, res: ServerResponse, path: string, phase: Phase): void {
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.setHeader("Allow", "GET, HEAD")
    send(res, 405, { error: `${path} does not answer ${req.method}; it answers GET and HEAD` })
  } else if (path === "/livez" || phase === "ready") {
    send(res, 200, { status: "ok" })
  } else {
    send(res, 503, { status: phase === "starting" ? "starting" : "shutting down" })
  }
}

/**
 * Requests node:http refuses before any handler sees them (a URL and headers
 * over 16 KiB, an unknown method, malformed HTTP) are answered in JSON like
 * every other error, then the connection is closed.
 */
function answerClientErrors(http: Server): void {
  http.on("clientError", (error: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) {
      socket.destroy()
      return
    }
    const [status, reason, message] =
      error.code === "HPE_HEADER_OVERFLOW"
        ? [
            431,
            "Request Header Fields Too Large",
            "the request line and headers exceed 16 KiB; send a shorter URL or shorter headers (a runnel token is well under 2 KiB)",
          ]
        : error.code === "HPE_INVALID_METHOD"
          ? [400, "Bad Request", "the request method is not one HTTP knows; use GET, PUT, POST or DELETE"]
          : [400, "Bad Request", `the request is not valid HTTP (${error.code ?? error.message})`]
    const body = `${JSON.stringify({ error: message })}\n`
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    )
  })
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "Content-Type": "application/json" })
  res.end(`${JSON.stringify(body)}\n`)
}

/** Listens on `port` of `host`; a refusal names the flag that chose the port (`--port`, `--metrics-port`). */
export function listen(http: NetServer, port: number, host: string, flag = "port"): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    http.once("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "EADDRINUSE") {
        reject(
          badRequest(
            `port ${port} on ${host} is in use; stop what uses it, or choose another with --${flag} (0 takes a free one)`,
          ),
        )
      } else if (error.code === "EADDRNOTAVAIL" || error.code === "ENOTFOUND") {
        reject(badRequest(`cannot serve on --host ${host}: it is not an address of this machine`))
      } else {
        reject(new SystemError(`cannot serve on ${host}:${port}: ${errorMessage(error)}`))
      }
    })
    http.listen(port, host, () => resolve(http.address() as AddressInfo))
  })
}

/** The address the process itself reaches a server bound to every address through: loopback. */
export function loopbackHost(address: string): string {
  if (address === "0.0.0.0") return "127.0.0.1"
  if (address === "::") return "::1"
  return address
}

export const urlHost = (host: string) => (host.includes(":") ? `[${host}]` : host)

/** Open access beyond this machine is said loudly, on one stderr line: there is no authentication yet. */
export function warnOpenAccess(host: string): void {
  if (isLoopback(host)) return
  process.stderr.write(
    `runnel: WARNING: serving on --host ${host} with NO AUTHENTICATION: anyone who can reach this address can store and run pipelines; serve on 127.0.0.1 or put an authenticating proxy in front\n`,
  )
}

const isLoopback = (host: string) =>
  host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) || host === "::ffff:127.0.0.1"
