import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client"
import { type FinalRunStatus, type RunStatus, runStatuses, type TaskStatus } from "../core/status.ts"

// Every Prometheus series runnel exposes, defined once (docs/operations.md, "What to watch", explains each).
// Labels take values from small fixed sets only (phases, statuses, drivers, webhook providers, outcomes):
// never a pipeline name, run id, user or anything secret, so a series count stays bounded and a scrape leaks
// nothing a metrics reader should not see. Nothing here touches prom-client's global default registry: the
// composition (cli/) makes one ProcessMetrics per process and hands each part the slice it records.

/** Task and run durations, in seconds: CI work takes from a tenth of a second to an hour. */
const durationBuckets = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600]

/** How an incoming webhook ended, as `runnel_webhook_deliveries_total{outcome}` counts it. */
export const webhookOutcomes = [
  /** 202 {run_id}: a Run was created and the pipeline did not answer in time. */
  "accepted",
  /** The pipeline's own http.respond() answered the caller. */
  "answered",
  /** 401: a signature or token missing or wrong, or a replayed timestamp. */
  "rejected-signature",
  /** 404: no pipeline with that id or name. */
  "unknown-pipeline",
  /** 409: the pipeline is paused. */
  "paused",
  /** 403: the `webhooks` feature is off. */
  "feature-disabled",
  /** 413: a body over --max-body-mb. */
  "too-large",
  /** 503: the run queue is full (--max-queue-size). */
  "queue-full",
  /** 503: the pipeline's webhook Secret cannot be read, so nothing is accepted. */
  "secret-unavailable",
  /** Any other refusal (4xx). */
  "refused",
  /** runnel failed (5xx). */
  "error",
] as const
export type WebhookOutcome = (typeof webhookOutcomes)[number]

/**
 * What the operator records. Cheap enough for the run path: a map lookup and
 * prom-client's observe. The gauges are read from `state` at each scrape, so
 * between scrapes they cost nothing.
 */
export type OperatorMetrics = {
  /** A task ended after `seconds` on `driver` (the run's driver). */
  taskEnded(driver: string, status: TaskStatus, seconds: number): void
  /** A run ended after `seconds` of executing (0 when it ended before it started). */
  runEnded(status: FinalRunStatus, seconds: number): void
  /** Where the gauges read from; the operator calls it once its caches are filled. */
  readFrom(state: OperatorState): void
}

export type OperatorState = {
  /** Runs of the namespace by phase, as the operator's cache holds them (a Run without a phase is queued). */
  runsByPhase(): ReadonlyMap<RunStatus, number>
  /** Runs waiting for a --max-in-flight slot. */
  queued(): number
  /** Runs and YAML jobs waiting for their pipeline's own limit (max_in_flight, serial, serial_groups). */
  waitingForPipeline(): number
}

/** What the API server records: per webhook and per response, a map lookup and a counter increment. */
export type ApiMetrics = {
  webhookDelivered(provider: string, outcome: WebhookOutcome): void
  /** The API answered with `status` (REST, MCP, /auth, the UI). */
  responded(status: number): void
}

/** One process's metrics: the parts each role records into, and the exposition a scraper reads. */
export type ProcessMetrics = {
  operator(): OperatorMetrics
  api(): ApiMetrics
  /** Counts the bytes of output the log store stores (UTF-8, after redaction). */
  logBytes(): { inc(bytes: number): void }
  /** The Prometheus text exposition of every series, and its media type. */
  exposition(): Promise<string>
  readonly contentType: string
}

/**
 * A registry of its own for this process, with prom-client's default process
 * and Node metrics (resident memory, open file descriptors, heap, event-loop
 * lag, GC); each role adds its series when the composition asks for them, so
 * `runnel operator` and `runnel apiserver` each expose only their own.
 */
export function processMetrics(): ProcessMetrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  return {
    operator: () => operatorMetrics(registry),
    api: () => apiMetrics(registry),
    logBytes: () =>
      new Counter({
        name: "runnel_log_bytes_stored_total",
        help: "Bytes of task and script output handed to the log store (UTF-8, after redaction)",
        registers: [registry],
      }),
    exposition: () => registry.metrics(),
    contentType: registry.contentType,
  }
}

function operatorMetrics(registry: Registry): OperatorMetrics {
  let state: OperatorState | undefined
  const tasks = new Histogram({
    name: "runnel_task_duration_seconds",
    help: "Duration of finished tasks, by the run's driver and the task's status",
    labelNames: ["driver", "outcome"] as const,
    buckets: durationBuckets,
    registers: [registry],
  })
  const runs = new Histogram({
    name: "runnel_run_duration_seconds",
    help: "Executing time of finished runs (0 for a run refused before it started), by final status",
    labelNames: ["outcome"] as const,
    buckets: durationBuckets,
    registers: [registry],
  })
  new Gauge({
    name: "runnel_runs",
    help: "Runs of the namespace by phase, as the operator's cache holds them",
    labelNames: ["phase"] as const,
    registers: [registry],
    collect() {
      const counts = state?.runsByPhase()
      for (const phase of runStatuses) this.set({ phase }, counts?.get(phase) ?? 0)
    },
  })
  new Gauge({
    name: "runnel_run_queue_depth",
    help: "Runs waiting for a slot: limit=server for --max-in-flight, limit=pipeline for a pipeline's own max_in_flight, serial or serial_groups (YAML jobs included)",
    labelNames: ["limit"] as const,
    registers: [registry],
    collect() {
      this.set({ limit: "server" }, state?.queued() ?? 0)
      this.set({ limit: "pipeline" }, state?.waitingForPipeline() ?? 0)
    },
  })
  const task = children((driver, outcome) => tasks.labels(driver, outcome))
  const run = children((outcome) => runs.labels(outcome))
  return {
    taskEnded: (driver, status, seconds) => task(driver, status).observe(seconds),
    runEnded: (status, seconds) => run(status, "").observe(seconds),
    readFrom(source) {
      state = source
    },
  }
}

function apiMetrics(registry: Registry): ApiMetrics {
  const deliveries = new Counter({
    name: "runnel_webhook_deliveries_total",
    help: "Incoming webhooks by detected provider and how they ended",
    labelNames: ["provider", "outcome"] as const,
    registers: [registry],
  })
  const responses = new Counter({
    name: "runnel_api_responses_total",
    help: "Responses of the API (REST, MCP, /auth, the UI) by status class",
    labelNames: ["class"] as const,
    registers: [registry],
  })
  const delivered = children((provider, outcome) => deliveries.labels(provider, outcome))
  const classes = ["1xx", "2xx", "3xx", "4xx", "5xx"]
  // Each class from 0, so that a ratio of 5xx to all answers has both sides before the first error.
  for (const label of classes) responses.inc({ class: label }, 0)
  const byClass = classes.map((label) => responses.labels(label))
  return {
    webhookDelivered: (provider, outcome) => delivered(provider, outcome).inc(),
    responded: (status) => byClass[Math.floor(status / 100) - 1]?.inc(),
  }
}

/**
 * A labelled metric's children by label values, each made on first use: recording then costs two map
 * lookups instead of a labels object and its hash per call. The label sets are small and fixed, so the maps stay small.
 */
function children<T>(make: (first: string, second: string) => T): (first: string, second: string) => T {
  const made = new Map<string, Map<string, T>>()
  return (first, second) => {
    let inner = made.get(first)
    if (inner === undefined) {
      inner = new Map()
      made.set(first, inner)
    }
    let child = inner.get(second)
    if (child === undefined) {
      child = make(first, second)
      inner.set(second, child)
    }
    return child
  }
}
