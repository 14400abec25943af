import { Readable } from "node:stream"
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js"
import type { Context, Middleware } from "koa"
import { errorMessage, RunnelError } from "../../lib/core/errors.ts"
import type { Log } from "../../lib/core/log.ts"
import type { AccessPolicy } from "../access.ts"
import { requestUser } from "../auth/authenticate.ts"
import { rawBody } from "../body.ts"
import { failureOf } from "../errors.ts"
import { type McpToolDeps, registerTools } from "./mcp-tools.ts"

export type McpEndpointDeps = McpToolDeps & {
  /** Whom the server admits (apiserver/access.ts); the tools ask it what each user may see. */
  policy: Pick<AccessPolicy, "check" | "mayView">
  /** Larger request bodies are refused. */
  maxBodyBytes: number
  log: Log
}

export const mcpPath = "/mcp"

/** JSON-RPC error codes of the MCP transport and JSON-RPC 2.0. */
const parseError = -32700
const invalidRequest = -32600
const invalidParams = -32602
const transportError = -32000

/**
 * POST /mcp: the Model Context Protocol over Streamable HTTP, stateless (contract.md section 5).
 * - Each POST gets its own transport and a server no other request is using (taken from a few idle
 *   ones, since building one with its tools costs milliseconds), both closed when the answer is
 *   sent: no session is kept, so any instance of the API server answers any request, and a bare `tools/call` with no
 *   `initialize` before it is answered like any other.
 * - The answer is JSON, or an SSE stream when the client's Accept names text/event-stream and not
 *   application/json. The SDK insists on both in Accept; a client that sends neither (curl) is
 *   answered in JSON rather than refused with 406.
 * - GET (a server-to-client stream) and DELETE (ending a session) have nothing to do on a stateless
 *   server: 405, as the MCP specification says.
 * - Nothing is answered with a 500: malformed JSON, a batch or an unknown tool are JSON-RPC errors;
 *   a failing tool is a tool result with `isError: true` and `{"error": message}`, the message
 *   chosen by apiserver/errors.ts as for REST (a 500's cause goes to the log only).
 */
export function mcpEndpoint(deps: McpEndpointDeps): Middleware {
  const idle: PooledServer[] = []
  return async (ctx, next) => {
    if (ctx.path !== mcpPath) return next()
    if (ctx.method !== "POST") {
      ctx.set("Allow", "POST")
      return answer(
        ctx,
        405,
        transportError,
        `${mcpPath} answers POST only: this MCP server is stateless, with no stream to GET and no session to DELETE`,
      )
    }
    let body: unknown
    try {
      const text = (await rawBody(ctx.req, ctx.get("Content-Length"), deps.maxBodyBytes)).toString("utf8")
      body = JSON.parse(text)
    } catch (error) {
      if (error instanceof RunnelError) return answer(ctx, error.status, transportError, error.message)
      return answer(
        ctx,
        400,
        parseError,
        `the body is not JSON (${errorMessage(error)}); send one JSON-RPC 2.0 request object`,
      )
    }
    if (Array.isArray(body)) {
      return answer(ctx, 400, invalidRequest, "JSON-RPC batches are not supported; send one request per POST")
    }
    // Authenticated as every request is (apiserver/app.ts, before this); --server-rbac refuses here.
    const user = requestUser(ctx)
    try {
      deps.policy.check(user)
    } catch (error) {
      const { status, message } = failureOf(error, deps.log, { method: ctx.method, path: ctx.path })
      return answer(ctx, status, transportError, message, idOf(body))
    }
    const pooled = idle.pop() ?? newServer(deps)
    pooled.tools.bind(user, (error) => failureOf(error, deps.log, { path: ctx.path, tool: toolName(body) }).message)
    const unknown = unknownTool(body, pooled.tools.names)
    if (unknown !== undefined) {
      idle.push(pooled)
      return answer(ctx, 200, invalidParams, unknown, idOf(body))
    }
    const { server } = pooled

    const accept = ctx.get("Accept")
    const sse = accept.includes("text/event-stream") && !accept.includes("application/json")
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: !sse,
    })
    ctx.res.on("close", () => {
      // Closed, the server takes the next request; a few are kept for requests that come at once.
      void server.close().then(() => {
        if (idle.length < maxIdleServers) idle.push(pooled)
      })
    })
    await server.connect(transport)
    // The SDK refuses a request whose Accept lacks either type, or whose Content-Type is not JSON; the body
    // is already read and parsed as JSON here, and the answer's type was chosen above.
    const headers = new Headers({ accept: "application/json, text/event-stream", "content-type": "application/json" })
    const protocolVersion = ctx.get("Mcp-Protocol-Version")
    if (protocolVersion !== "") headers.set("mcp-protocol-version", protocolVersion)
    const response = await transport.handleRequest(
      new Request(`http://runnel${mcpPath}`, { method: "POST", headers }),
      {
        parsedBody: body,
      },
    )
    ctx.status = response.status
    response.headers.forEach((value, key) => {
      ctx.set(key, value)
    })
    // A JSON answer is complete once handleRequest resolves: sent as one string, not piped through web streams.
    ctx.body =
      response.body === null
        ? ""
        : sse
          ? Readable.fromWeb(response.body as import("node:stream/web").ReadableStream)
          : await response.text()
  }
}

/** Servers kept for the next requests; more requests at once get new ones. */
const maxIdleServers = 8

type PooledServer = { server: McpServer; tools: ReturnType<typeof registerTools> }

function newServer(deps: McpToolDeps): PooledServer {
  const server = new McpServer(
    { name: "runnel", version: "0.1.0" },
    {
      instructions:
        "runnel runs CI pipelines. Runs have ids; each run has tasks addressed by paths. Start with list_runs or search_tasks, then get_run, list_run_tasks, get_run_task (paged) or get_task_output (grep).",
    },
  )
  return { server, tools: registerTools(server, deps) }
}

/** A JSON-RPC error response, sent by Koa. */
function answer(ctx: Context, status: number, code: number, message: string, id: unknown = null): void {
  ctx.status = status
  ctx.body = { jsonrpc: "2.0", error: { code, message }, id: id ?? null }
}

const idOf = (body: unknown) => {
  const id = (body as { id?: unknown } | null)?.id
  return typeof id === "string" || typeof id === "number" ? id : null
}

const toolName = (body: unknown) => (body as { params?: { name?: unknown } } | null)?.params?.name

/** The message for a `tools/call` naming a tool this user has not got, listing those they have. */
function unknownTool(body: unknown, tools: readonly string[]): string | undefined {
  if ((body as { method?: unknown } | null)?.method !== "tools/call") return undefined
  const name = toolName(body)
  if (typeof name === "string" && tools.includes(name)) return undefined
  return `unknown tool ${JSON.stringify(name)}; the tools are: ${tools.join(", ")}`
}
