import { createServer, type ServerResponse } from "node:http"
import type { MetricsSettings } from "../lib/config/operator.ts"
import { errorMessage } from "../lib/core/errors.ts"
import type { ProcessMetrics } from "../lib/metrics/metrics.ts"
import { listen, urlHost } from "./http-server.ts"

/**
 * `--metrics-port`: a listener of its own that answers GET /metrics and
 * nothing else, without authentication, so that a scraper needs no
 * credentials while the API's port keeps its authentication whole (no
 * /metrics there). It binds the address of --host; in a cluster the chart
 * opens the port to scrapers only (docs/decisions.md, "Metrics").
 */
export async function serveMetrics(
  metrics: Pick<ProcessMetrics, "exposition" | "contentType">,
  settings: MetricsSettings,
): Promise<{ close(): Promise<void> }> {
  const http = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0] ?? "/"
    if (path !== "/metrics") {
      send(res, 404, `no route for ${req.method} ${path}; this port serves only GET /metrics`)
    } else if (req.method !== "GET" && req.method !== "HEAD") {
      res.setHeader("Allow", "GET, HEAD")
      send(res, 405, `/metrics does not answer ${req.method}; it answers GET and HEAD`)
    } else {
      metrics.exposition().then(
        (text) => {
          res.writeHead(200, { "Content-Type": metrics.contentType })
          res.end(req.method === "HEAD" ? undefined : text)
        },
        (error: unknown) => send(res, 500, `the metrics could not be collected: ${errorMessage(error)}`),
      )
    }
  })
  const address = await listen(http, settings.port, settings.host, "metrics-port")
  process.stdout.write(`runnel: metrics on http://${urlHost(settings.host)}:${address.port}/metrics\n`)
  return {
    close: () =>
      new Promise((resolve) => {
        http.close(() => resolve())
        http.closeAllConnections()
      }),
  }
}

function send(res: ServerResponse, status: number, error: string): void {
  res.writeHead(status, { "Content-Type": "application/json" })
  res.end(`${JSON.stringify({ error })}\n`)
}

/** The process's metrics when --metrics-port is given, else none: prom-client is loaded only then. */
export async function processMetricsOf(settings: MetricsSettings | undefined): Promise<ProcessMetrics | undefined> {
  if (settings === undefined) return undefined
  return (await import("../lib/metrics/metrics.ts")).processMetrics()
}
