import { createHmac } from "node:crypto"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { startEmbeddedApi } from "../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { root } from "./cli.ts"
import { describeDocker } from "./docker.ts"
import { call, eventually, metricsLine, metricsOf, runToEnd, script, serverProcesses } from "./server-process.ts"

// The Prometheus endpoint of --metrics-port, scraped over loopback from real `runnel` processes after real runs
// and webhook deliveries: what moved is what a person watching the dashboards would expect to move.
const servers = serverProcesses("runnel-metrics-test-")
afterAll(() => servers.cleanUp())

const secret = "metrics-hook-secret-7d1e"
const signature = (body: string) => `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`
const answering = `export const pipeline = async () => {
  http.respond({ status: 200, body: "built" })
}
`

type Sample = { name: string; labels: Record<string, string>; value: number }

/** The samples of a text exposition (comments left out). */
function parse(text: string): Sample[] {
  const samples: Sample[] = []
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null) throw new Error(`not an exposition line: ${line}`)
    const labels: Record<string, string> = {}
    for (const pair of (match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1] ?? ""] = pair[2] ?? ""
    }
    samples.push({ name: match[1] ?? "", labels, value: Number(match[3]) })
  }
  return samples
}

type Scrape = {
  text: string
  type: string | null
  value(name: string, labels?: Record<string, string>): number | undefined
}

/** GET /metrics: its text, and the value of one series (undefined when absent). */
async function scrape(metricsUrl: string): Promise<Scrape> {
  const response = await fetch(`${metricsUrl}/metrics`)
  expect(response.status).toBe(200)
  const text = await response.text()
  const samples = parse(text)
  return {
    text,
    type: response.headers.get("content-type"),
    value: (name, labels = {}) =>
      samples.find(
        (sample) =>
          sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value),
      )?.value,
  }
}

/** Scrapes until `holds` (the gauges follow the operator's cache, the histograms the runs' ends). */
const scrapeUntil = (metricsUrl: string, holds: (scraped: Scrape) => boolean, what: string) =>
  eventually(() => scrape(metricsUrl), holds, what)

describeDocker("GET /metrics of runnel server --metrics-port", () => {
  it("counts a docker task, its run, a signed webhook's answer and refused deliveries, with no names in labels", async () => {
    const server = await servers.start(["--driver", "docker", "--metrics-port", "0"])
    const metrics = metricsOf(server)
    const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
    expect(
      (await api("PUT", "/api/pipelines/metrics-build-pipeline", { content: script("echo hello-metrics") })).status,
    ).toBe(201)
    const built = await runToEnd(server.url, "metrics-build-pipeline", 60_000)
    expect(built.run.status, built.run.error_message).toBe("success")
    expect(
      (await api("PUT", "/api/pipelines/metrics-hook-pipeline", { content: answering, webhook_secret: secret })).status,
    ).toBe(201)
    const body = JSON.stringify({ ref: "refs/heads/main" })
    const deliver = (pipeline: string, headers: Record<string, string>) =>
      fetch(`${server.url}/api/webhooks/${pipeline}`, { method: "POST", headers, body })
    const answered = await deliver("metrics-hook-pipeline", {
      "X-GitHub-Event": "push",
      "X-Hub-Signature-256": signature(body),
    })
    expect(answered.status).toBe(200)
    expect(await answered.text()).toBe("built")
    const hookRun = answered.headers.get("X-Runnel-Run-Id") ?? ""
    const forged = await deliver("metrics-hook-pipeline", {
      "X-GitHub-Event": "push",
      "X-Hub-Signature-256": "sha256=00",
    })
    expect(forged.status).toBe(401)
    expect((await deliver("no-such-pipeline", { "X-GitHub-Event": "push" })).status).toBe(404)

    // The webhook's run ends after its answer; the gauges follow the operator's cache.
    const after = await scrapeUntil(
      metrics,
      (scraped) => scraped.value("runnel_runs", { phase: "success" }) === 2,
      "both runs show as succeeded",
    )
    expect(after.type).toMatch(/^text\/plain; version=0\.0\.4/)
    for (const phase of ["queued", "running", "failure", "error", "aborted"]) {
      expect(after.value("runnel_runs", { phase }), phase).toBe(0)
    }
    expect(after.value("runnel_run_queue_depth", { limit: "server" })).toBe(0)
    expect(after.value("runnel_run_queue_depth", { limit: "pipeline" })).toBe(0)
    const task = { driver: "docker", outcome: "success" }
    expect(after.value("runnel_task_duration_seconds_count", task)).toBe(1)
    expect(after.value("runnel_task_duration_seconds_bucket", { ...task, le: "+Inf" })).toBe(1)
    expect(after.value("runnel_task_duration_seconds_bucket", { ...task, le: "3600" })).toBe(1)
    expect(after.value("runnel_task_duration_seconds_bucket", { ...task, le: "0.1" })).toBeLessThanOrEqual(1)
    const taskSeconds = after.value("runnel_task_duration_seconds_sum", task) ?? 0
    expect(taskSeconds).toBeGreaterThan(0)
    expect(taskSeconds).toBeLessThan(60)
    expect(after.value("runnel_run_duration_seconds_count", { outcome: "success" })).toBe(2)
    expect(after.value("runnel_webhook_deliveries_total", { provider: "github", outcome: "answered" })).toBe(1)
    expect(after.value("runnel_webhook_deliveries_total", { provider: "github", outcome: "rejected-signature" })).toBe(
      1,
    )
    expect(after.value("runnel_webhook_deliveries_total", { provider: "github", outcome: "unknown-pipeline" })).toBe(1)
    expect(after.value("runnel_webhook_deliveries_total", { provider: "github", outcome: "accepted" })).toBeUndefined()
    expect(after.value("runnel_log_bytes_stored_total")).toBeGreaterThanOrEqual("hello-metrics\n".length)
    expect(after.value("runnel_api_responses_total", { class: "2xx" })).toBeGreaterThanOrEqual(4)
    expect(after.value("runnel_api_responses_total", { class: "4xx" })).toBe(2)
    expect(after.value("runnel_api_responses_total", { class: "5xx" })).toBe(0)
    // prom-client's process and Node metrics.
    expect(after.value("process_resident_memory_bytes")).toBeGreaterThan(10 * 1024 * 1024)
    expect(after.value("process_open_fds")).toBeGreaterThan(3)
    expect(after.value("nodejs_heap_size_used_bytes")).toBeGreaterThan(0)
    expect(after.value("nodejs_eventloop_lag_p99_seconds")).toBeGreaterThan(0)
    // Labels leak nothing: no pipeline, run or secret.
    for (const word of [
      "metrics-build-pipeline",
      "metrics-hook-pipeline",
      "no-such-pipeline",
      built.run.id,
      hookRun,
      secret,
    ]) {
      expect(word.length).toBeGreaterThan(0)
      expect(after.text).not.toContain(word)
    }
    server.child.kill("SIGTERM")
  }, 120_000)
})

describe("runnel_run_queue_depth and runnel_runs", () => {
  it("show runs waiting for a --max-in-flight slot while one runs, and none once all have run", async () => {
    const server = await servers.start(["--max-in-flight", "1", "--metrics-port", "0"])
    const metrics = metricsOf(server)
    expect((await call(server.url, "PUT", "/api/pipelines/queued-runs", { content: script("sleep 3") })).status).toBe(
      201,
    )
    for (let i = 0; i < 3; i++) {
      expect((await call(server.url, "POST", "/api/pipelines/queued-runs/trigger")).status).toBe(202)
    }
    // The queue is the operator's, the phases the Runs' statuses: the first run's `running` lands once its task starts.
    const busy = await scrapeUntil(
      metrics,
      (scraped) =>
        scraped.value("runnel_run_queue_depth", { limit: "server" }) === 2 &&
        scraped.value("runnel_runs", { phase: "running" }) === 1,
      "two runs wait for the one slot while the first runs",
    )
    expect(busy.value("runnel_runs", { phase: "queued" })).toBe(2)
    const done = await scrapeUntil(
      metrics,
      (scraped) => scraped.value("runnel_runs", { phase: "success" }) === 3,
      "all three runs succeed",
    )
    expect(done.value("runnel_run_queue_depth", { limit: "server" })).toBe(0)
    expect(done.value("runnel_runs", { phase: "queued" })).toBe(0)
    expect(done.value("runnel_run_duration_seconds_count", { outcome: "success" })).toBe(3)
    // Each run slept 3 s: their durations are in the buckets above 1 s.
    expect(done.value("runnel_run_duration_seconds_bucket", { outcome: "success", le: "1" })).toBe(0)
    expect(done.value("runnel_run_duration_seconds_bucket", { outcome: "success", le: "30" })).toBe(3)
    server.child.kill("SIGTERM")
  }, 60_000)
})

describe("--metrics-port with authentication on", () => {
  it("serves /metrics on its own port without credentials, while the API's port keeps no /metrics and asks for them", async () => {
    const server = await servers.start([
      "--basic-auth-username",
      "admin",
      "--basic-auth-password",
      "metrics-test-password",
      "--metrics-port",
      "0",
    ])
    const metrics = metricsOf(server)
    expect(new URL(metrics).port).not.toBe(new URL(server.url).port)
    const credentials = { Authorization: `Basic ${Buffer.from("admin:metrics-test-password").toString("base64")}` }
    // The API's port: no /metrics, with or without credentials; the API itself still wants them.
    expect((await fetch(`${server.url}/metrics`)).status).toBe(404)
    expect((await fetch(`${server.url}/metrics`, { headers: credentials })).status).toBe(404)
    expect((await fetch(`${server.url}/api/pipelines`)).status).toBe(401)
    expect((await fetch(`${server.url}/api/pipelines`, { headers: credentials })).status).toBe(200)
    // The metrics port: /metrics alone, without credentials.
    const scraped = await scrape(metrics)
    expect(scraped.value("runnel_api_responses_total", { class: "4xx" })).toBe(1)
    expect(scraped.value("runnel_api_responses_total", { class: "2xx" })).toBe(1)
    const unknown = await fetch(`${metrics}/api/pipelines`, { headers: credentials })
    expect(unknown.status).toBe(404)
    expect(((await unknown.json()) as { error: string }).error).toMatch(/this port serves only GET \/metrics/)
    const posted = await fetch(`${metrics}/metrics`, { method: "POST" })
    expect(posted.status).toBe(405)
    expect(posted.headers.get("allow")).toBe("GET, HEAD")
    server.child.kill("SIGTERM")
  })

  it("is off without --metrics-port: nothing else listens and the API's port has no /metrics", async () => {
    const server = await servers.start()
    expect(server.stdout()).not.toMatch(/metrics on/)
    expect((await fetch(`${server.url}/metrics`)).status).toBe(404)
    server.child.kill("SIGTERM")
  })

  it("refuses a --metrics-port that is the API's --port, naming both", async () => {
    const result = await servers.start(["--port", "18093", "--metrics-port", "18093"]).catch((error: Error) => error)
    expect(String(result)).toMatch(/--metrics-port 18093 is the --port the API serves on/)
  })
})

describe("runnel operator and runnel apiserver --metrics-port", () => {
  it("each serve their own role's series", async () => {
    const kube = await startEmbeddedApi({ crds: loadCrds(join(root, "crds")) })
    try {
      const kubeconfig = join(kube.dir, "kubeconfig")
      writeFileSync(kubeconfig, kube.kubeConfig.exportConfig())
      const apiserver = await servers.start(["--kubeconfig", kubeconfig, "--metrics-port", "0"], ["apiserver"])
      const operator = await servers.start(
        ["--kubeconfig", kubeconfig, "--metrics-port", "0"],
        ["operator"],
        metricsLine,
      )
      expect(
        (await call(apiserver.url, "PUT", "/api/pipelines/split-roles", { content: script("echo split") })).status,
      ).toBe(201)
      expect((await runToEnd(apiserver.url, "split-roles")).run.status).toBe("success")
      const operatorSeries = await scrapeUntil(
        operator.url,
        (scraped) => scraped.value("runnel_run_duration_seconds_count", { outcome: "success" }) === 1,
        "the operator counts the run",
      )
      expect(operatorSeries.value("runnel_runs", { phase: "success" })).toBe(1)
      expect(operatorSeries.value("runnel_task_duration_seconds_count", { driver: "native", outcome: "success" })).toBe(
        1,
      )
      expect(operatorSeries.value("runnel_log_bytes_stored_total")).toBeGreaterThanOrEqual("split\n".length)
      expect(operatorSeries.text).not.toMatch(/runnel_webhook_deliveries_total|runnel_api_responses_total/)
      expect(operatorSeries.value("process_resident_memory_bytes")).toBeGreaterThan(0)
      const apiSeries = await scrape(metricsOf(apiserver))
      expect(apiSeries.value("runnel_api_responses_total", { class: "2xx" })).toBeGreaterThanOrEqual(3)
      expect(apiSeries.text).toMatch(/# TYPE runnel_webhook_deliveries_total counter/)
      expect(apiSeries.text).not.toMatch(/runnel_runs|runnel_task_duration_seconds|runnel_log_bytes_stored_total/)
      expect(apiSeries.value("process_resident_memory_bytes")).toBeGreaterThan(0)
      operator.child.kill("SIGTERM")
      apiserver.child.kill("SIGTERM")
    } finally {
      await kube.close()
    }
  }, 60_000)
})
