import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { KubeConfig } from "@kubernetes/client-node"
import type { Command } from "commander"
import { startApiServer } from "../apiserver/app.ts"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import {
  type FlagSpec,
  type FlagValues,
  hostEnvironment,
  parseDurationFlag,
  parsePositiveInt,
  readFlags,
} from "../lib/config/flags.ts"
import { badRequest, errorMessage, SystemError } from "../lib/core/errors.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import type { SecretStore } from "../lib/secrets/secret-store.ts"
import type { Operator } from "../operator/operator.ts"
import { driverRegistry } from "./drivers.ts"
import { addFlags } from "./flags.ts"
import { processLog } from "./log.ts"
import {
  logStorePath,
  onShutdownSignal,
  openConfiguredSecretStore,
  operatorFlags,
  operatorSettings,
  startConfiguredOperator,
} from "./operator.ts"

export const serverFlags: readonly FlagSpec[] = [
  { name: "port", value: "PORT", defaultValue: "8080", description: "port to serve on; 0 takes a free one" },
  { name: "host", value: "HOST", defaultValue: "127.0.0.1", description: "address to serve on" },
  ...operatorFlags,
  {
    name: "max-queue-size",
    value: "N",
    defaultValue: "100",
    description: "queued runs beyond which triggers answer 503",
  },
  { name: "max-body-mb", value: "MB", defaultValue: "10", description: "largest request body the API accepts" },
  {
    name: "webhook-timeout",
    value: "DURATION",
    defaultValue: "5s",
    description: "how long a webhook waits for the pipeline's http.respond() before it is answered 202",
  },
  {
    name: "webhook-max-age",
    value: "DURATION",
    defaultValue: "5m",
    description: "Slack and Stripe webhooks signed longer ago than this are refused as replays",
  },
]

const crdsDir = join(import.meta.dirname, "..", "crds")
const embeddedPrefix = "/k8s"

export function serverCommand(program: Command): void {
  const command = program
    .command("server")
    .description(
      "serve runnel on one machine: the embedded Kubernetes API at /k8s (or the cluster of --kubeconfig), the operator, and /health",
    )
  addFlags(command, serverFlags)
  command.action(async (options: Record<string, unknown>) => {
    await server(options)
  })
}

/**
 * One process: the embedded API (unless --kubeconfig names a cluster, or it runs in a Pod), the
 * operator talking to it over loopback HTTP as it would to a cluster, and
 * /health. Opened in order, closed in reverse.
 */
async function server(options: Record<string, unknown>): Promise<void> {
  const flags = readFlags(serverFlags, options)
  const settings = operatorSettings(flags)
  const port = flags.port === "0" ? 0 : parsePositiveInt(flags.port as string, "port")
  const host = String(flags.host)
  const maxQueueSize = parsePositiveInt(flags["max-queue-size"] as string, "max-queue-size")
  const maxBodyBytes = parsePositiveInt(flags["max-body-mb"] as string, "max-body-mb") * 1024 * 1024

  const { inCluster } = hostEnvironment()
  const embedded =
    settings.kubeconfig === undefined && !inCluster
      ? createEmbeddedApi({ db: settings.storagePath, crds: loadCrds(crdsDir), prefix: embeddedPrefix })
      : undefined
  let draining = false
  let api: ((req: IncomingMessage, res: ServerResponse) => void) | undefined
  const http = createServer((req, res) => {
    if (embedded?.handle(req, res)) return
    if (api !== undefined && /^\/api(\/|\?|$)/.test(req.url ?? "")) {
      api(req, res)
      return
    }
    route(req, res, draining)
  })
  answerClientErrors(http)
  let store: LogStore | undefined
  let secretStore: SecretStore | undefined
  let operator: Operator | undefined
  let apiServer: Awaited<ReturnType<typeof startApiServer>> | undefined
  let closing: Promise<void> | undefined
  const close = (now: boolean): Promise<void> => {
    if (closing !== undefined) {
      if (now) void operator?.stop(0) // a second signal: no more grace
      return closing
    }
    draining = true
    closing = (async () => {
      // The operator writes its runs' final status through the HTTP server, so it stops first.
      await operator?.stop(now ? 0 : settings.shutdownGraceMs)
      await apiServer?.stop()
      await closeHttp(http)
      embedded?.close()
      await secretStore?.close()
      await store?.close()
    })()
    return closing
  }
  try {
    const address = await listen(http, port, host)
    const kubeConfig = new KubeConfig()
    if (settings.kubeconfig !== undefined) loadKubeconfig(kubeConfig, settings.kubeconfig)
    else if (inCluster) kubeConfig.loadFromCluster()
    else
      kubeConfig.loadFromOptions(
        loopbackConfig(`http://${urlHost(loopbackHost(address.address))}:${address.port}${embeddedPrefix}`),
      )
    store = await openSqliteLogStore(logStorePath(settings.storagePath))
    secretStore = await openConfiguredSecretStore(settings)
    operator = await startConfiguredOperator(settings, kubeConfig, store, secretStore)
    apiServer = await configuredApiServer({
      kubeConfig,
      namespace: settings.namespace,
      logs: store,
      secrets: secretStore,
      defaultDriver: settings.driver,
      allowedDrivers: settings.allowedDrivers,
      maxQueueSize,
      features: settings.features,
      maxBodyBytes,
      ...webhookSettings(flags),
      draining: () => draining,
    })
    api = apiServer.callback
    warnOpenAccess(host)
    process.stdout.write(`runnel: listening on http://${urlHost(host)}:${address.port}\n`)
  } catch (error) {
    await close(true).catch(() => {})
    throw error
  }
  onShutdownSignal(close)
}

/** The API server with this process's logs: diagnostics on stderr, audit entries as JSON lines on stdout. */
export function configuredApiServer(
  deps: Omit<Parameters<typeof startApiServer>[0], "log" | "audit" | "allowedDrivers"> & {
    allowedDrivers: readonly string[] | "*"
  },
): ReturnType<typeof startApiServer> {
  return startApiServer({
    ...deps,
    allowedDrivers: deps.allowedDrivers === "*" ? driverRegistry().names() : deps.allowedDrivers,
    log: processLog(),
    // One JSON line per entry on stdout, apart from the diagnostics on stderr (docs/decisions.md).
    audit: ({ event, ...fields }) =>
      process.stdout.write(
        `${JSON.stringify({ time: new Date().toISOString(), level: "info", kind: "audit", msg: event, ...fields })}\n`,
      ),
  })
}

/** The webhook flags of the API server, checked. */
export function webhookSettings(flags: FlagValues) {
  return {
    webhookTimeoutMs: parseDurationFlag(flags["webhook-timeout"] as string, "webhook-timeout"),
    webhookMaxAgeMs: parseDurationFlag(flags["webhook-max-age"] as string, "webhook-max-age"),
  }
}

/** Open access beyond this machine is said loudly, on one stderr line: there is no authentication yet. */
export function warnOpenAccess(host: string): void {
  if (isLoopback(host)) return
  process.stderr.write(
    `runnel: WARNING: serving on --host ${host} with NO AUTHENTICATION: anyone who can reach this address can store and run pipelines; serve on 127.0.0.1 or put an authenticating proxy in front\n`,
  )
}

const isLoopback = (host: string) =>
  host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) || host === "::ffff:127.0.0.1"

export function loadKubeconfig(kubeConfig: KubeConfig, file: string): void {
  try {
    kubeConfig.loadFromFile(file)
  } catch (error) {
    throw badRequest(`cannot load --kubeconfig "${file}": ${errorMessage(error)}`)
  }
}

/** The routes of this process besides the embedded API; the API server's routes join here. */
function route(req: IncomingMessage, res: ServerResponse, draining: boolean): void {
  if (health(req, res, draining)) return
  send(res, 404, {
    error: `no route for ${req.method} ${(req.url ?? "/").split("?")[0]}; this server answers /health, the REST API under /api and the Kubernetes API under ${embeddedPrefix}`,
  })
}

/** Answers /health (true) or leaves the request to the caller (false). */
export function health(req: IncomingMessage, res: ServerResponse, draining: boolean): boolean {
  if ((req.url ?? "/").split("?")[0] !== "/health") return false
  if (req.method === "GET" || req.method === "HEAD") {
    send(res, draining ? 503 : 200, draining ? { status: "shutting down" } : { status: "ok" })
  } else {
    res.setHeader("Allow", "GET, HEAD")
    send(res, 405, { error: `/health does not answer ${req.method}; it answers GET and HEAD` })
  }
  return true
}

/**
 * Requests node:http refuses before any handler sees them (a URL and headers
 * over 16 KiB, an unknown method, malformed HTTP) are answered in JSON like
 * every other error, then the connection is closed.
 */
export function answerClientErrors(http: Server): void {
  http.on("clientError", (error: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) {
      socket.destroy()
      return
    }
    const [status, reason, message] =
      error.code === "HPE_HEADER_OVERFLOW"
        ? [431, "Request Header Fields Too Large", "the request line and headers exceed 16 KiB; send less in the URL"]
        : error.code === "HPE_INVALID_METHOD"
          ? [400, "Bad Request", "the request method is not one HTTP knows; use GET, PUT, POST or DELETE"]
          : [400, "Bad Request", `the request is not valid HTTP (${error.code ?? error.message})`]
    const body = `${JSON.stringify({ error: message })}\n`
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    )
  })
}

export function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "Content-Type": "application/json" })
  res.end(`${JSON.stringify(body)}\n`)
}

export function listen(http: Server, port: number, host: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    http.once("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "EADDRINUSE") {
        reject(
          badRequest(
            `port ${port} on ${host} is in use; stop what uses it, or choose another with --port (0 takes a free one)`,
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

/** Ends keep-alive connections (the operator's own included) so close() does not wait for idle clients. */
export function closeHttp(http: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!http.listening) {
      resolve()
      return
    }
    http.close(() => resolve())
    http.closeAllConnections()
  })
}

/** The operator reaches a server bound to every address through loopback. */
function loopbackHost(address: string): string {
  if (address === "0.0.0.0") return "127.0.0.1"
  if (address === "::") return "::1"
  return address
}

export const urlHost = (host: string) => (host.includes(":") ? `[${host}]` : host)

function loopbackConfig(server: string) {
  return {
    // client-node refuses plain http unless TLS verification is off; loopback carries no TLS.
    clusters: [{ name: "embedded", server, skipTLSVerify: true }],
    users: [{ name: "runnel" }],
    contexts: [{ name: "embedded", cluster: "embedded", user: "runnel", namespace: "default" }],
    currentContext: "embedded",
  }
}
