import { type Log, quietLog } from "../lib/core/log.ts"
import type { KubeConfig, KubernetesObject } from "../lib/kube/client-node.js"
import { type Informer, type InformerHandlers, startInformer } from "../lib/kube/informer.ts"
import { ResourceClient } from "../lib/kube/resource-client.ts"
import type { GateObject, PipelineObject, RunObject, ScheduleObject } from "../lib/kube/resources.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import type { OperatorMetrics } from "../lib/metrics/metrics.ts"
import type { RunSecrets } from "../lib/secrets/secret-store.ts"
import { DriverPool, type DriverSource } from "./driver-pool.ts"
import type { NetworkSettings } from "./engine/engine.ts"
import type { SandboxLimits } from "./engine/sandbox/sandbox.ts"
import { GateKeeper } from "./gate-keeper.ts"
import { PipelineGenerations, PipelineReconciler } from "./pipeline-reconciler.ts"
import { RunReconciler } from "./run-reconciler.ts"
import { RunRetention } from "./run-retention.ts"
import { ScheduleReconciler } from "./schedule-reconciler.ts"

export type OperatorOptions = {
  /** Any Kubernetes API with runnel's CRDs: the embedded one over loopback, or a cluster's. */
  readonly kubeConfig: KubeConfig
  /** The namespace whose Pipelines and Runs this operator reconciles. */
  readonly namespace: string
  readonly store: LogStore
  /** Each run's secrets: its pipeline's, its own global ones, the global ones. */
  readonly secrets: RunSecrets
  /** The `webhooks` feature, on unless said otherwise: off, runs get no webhook data or response channel. */
  readonly webhooks?: boolean
  /** The `gates` feature, off unless said: off, pipelines' gates fail and no Gate is watched. */
  readonly gates?: boolean
  /** The `schedules` feature, off unless said otherwise: off, Schedules are kept and listed but never fire. */
  readonly schedules?: boolean
  /** Cronjob mode (`--schedules-mode cronjob`): five-field cron Schedules become CronJobs running this image. */
  readonly cronJobs?: { readonly image: string; readonly serviceAccount: string }
  /** Makes drivers by name; cli/ passes its registry. */
  readonly drivers: DriverSource
  /** `--driver`: for pipelines whose spec names none. */
  readonly defaultDriver: string
  /** `--allowed-drivers`: "*" or the names allowed. */
  readonly allowedDrivers: readonly string[] | "*"
  readonly maxInFlight: number
  /** `--keep-runs`: finished Runs kept per Pipeline; older ones are deleted. 0 or absent keeps all. */
  readonly keepRuns?: number
  readonly limits: SandboxLimits
  /** YAML pipelines' small image (`--mock-image`); busybox unless said otherwise. */
  readonly mockImage?: string
  /** fetch(), notifications and native git: the features and the server's flags for them; all on with defaults when absent. */
  readonly network?: NetworkSettings
  /** Progress writes to a Run's status are coalesced within this window; 150 ms by default. */
  readonly statusThrottleMs?: number
  /** Where runs, tasks and the queue are reported for monitoring (cli/ passes the process's metrics); none without it. */
  readonly metrics?: OperatorMetrics
  readonly log?: Log
}

/**
 * A running operator. stop() is shutdown as STYLE.md says: refuse new work
 * (queued runs stay queued), let executing runs finish within `graceMs`,
 * abort the rest, then close in reverse order of opening. It is idempotent;
 * called again with 0 while stopping, it aborts the executing runs at once.
 */
export type Operator = {
  stop(graceMs: number): Promise<void>
}

/**
 * Starts the Pipeline and Run reconcilers on informers of one namespace.
 * Resolves once both caches are filled and the first pass is scheduled, so a
 * Run left `running` by an earlier process is resumed right away.
 */
export async function startOperator(options: OperatorOptions): Promise<Operator> {
  const log = options.log ?? quietLog
  const client = new ResourceClient(options.kubeConfig, options.namespace)
  const generations = new PipelineGenerations()
  const drivers = new DriverPool({ source: options.drivers, allowed: options.allowedDrivers, log })
  const pipelineReconciler = new PipelineReconciler({ client, log })
  let pipelineInformer: Informer<PipelineObject> | undefined
  const pipelines = { get: (name: string) => pipelineInformer?.get(name) }
  const gateKeeper = options.gates === true ? new GateKeeper({ client, log }) : undefined
  const scheduleReconciler = new ScheduleReconciler({
    client,
    pipelines,
    firing: options.schedules ?? false,
    cronJobs: options.cronJobs === undefined ? undefined : { ...options.cronJobs, namespace: options.namespace },
    log,
  })
  const runs = new RunReconciler({
    client,
    pipelines,
    generations,
    store: options.store,
    secrets: options.secrets,
    webhooks: options.webhooks ?? true,
    ...(gateKeeper === undefined ? {} : { gates: gateKeeper }),
    drivers,
    defaultDriver: options.defaultDriver,
    limits: options.limits,
    mockImage: options.mockImage ?? "busybox",
    ...(options.network === undefined ? {} : { network: options.network }),
    maxInFlight: options.maxInFlight,
    statusThrottleMs: options.statusThrottleMs ?? 150,
    ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
    log,
  })

  pipelineInformer = await startInformer<PipelineObject>({
    kubeConfig: options.kubeConfig,
    path: client.path("pipelines"),
    namespace: options.namespace,
    list: () => client.list("pipelines"),
    handlers: {
      changed(pipeline) {
        generations.remember(pipeline)
        pipelineReconciler.changed(pipeline)
        scheduleReconciler.pipelineChanged(pipeline.metadata?.name ?? "")
      },
      deleted(pipeline) {
        generations.forget(pipeline.metadata?.uid)
        scheduleReconciler.pipelineChanged(pipeline.metadata?.name ?? "")
      },
    },
    log,
  })
  pipelineReconciler.attach(pipelineInformer)
  /** An informer of one more kind; if it cannot start, those already started are stopped. */
  const started: Informer<unknown>[] = [pipelineInformer]
  const watch = async <T extends KubernetesObject>(
    plural: "runs" | "schedules" | "gates",
    handlers: InformerHandlers<T>,
  ) => {
    try {
      const informer = await startInformer<T>({
        kubeConfig: options.kubeConfig,
        path: client.path(plural),
        namespace: options.namespace,
        list: () => client.list(plural),
        handlers,
        log,
      })
      started.push(informer)
      return informer
    } catch (error) {
      for (const informer of started.reverse()) await informer.stop()
      throw error
    }
  }
  const scheduleInformer = await watch<ScheduleObject>("schedules", {
    changed: (schedule) => scheduleReconciler.changed(schedule),
    deleted: (schedule) => scheduleReconciler.deleted(schedule),
  })
  // Gates before Runs: a resumed run finds its gate in the cache.
  const gateInformer =
    gateKeeper === undefined
      ? undefined
      : await watch<GateObject>("gates", {
          changed: (gate) => gateKeeper.changed(gate),
          deleted: (gate) => gateKeeper.deleted(gate),
        })
  if (gateInformer !== undefined) gateKeeper?.attach(gateInformer)
  let runInformer: Informer<RunObject> | undefined
  const retention = new RunRetention({
    keep: options.keepRuns ?? 0,
    run: (name) => runInformer?.get(name),
    gates: () => gateInformer?.list() ?? [],
    schedule: (name) => scheduleInformer.get(name),
    deleteRun: (name) => client.deleteRun(name),
    log,
  })
  runInformer = await watch<RunObject>("runs", {
    changed: (run) => {
      runs.changed(run)
      retention.changed(run)
    },
    deleted: (run) => {
      runs.deleted(run)
      retention.deleted(run)
    },
  })
  // Leftovers of crashed processes on the default driver go now, even if no run uses that driver again.
  drivers.get(options.defaultDriver, {}).catch(() => {})
  runs.attach(runInformer)
  // Runs that finished before this start count too: the history is trimmed now, not at the next finish.
  for (const run of runInformer.list()) retention.changed(run)
  options.metrics?.readFrom({
    runsByPhase: () => runs.runsByPhase(),
    queued: () => runs.queued,
    waitingForPipeline: () => runs.waitingForPipeline,
  })
  scheduleReconciler.attach(scheduleInformer)
  log("operator.started", { namespace: options.namespace, maxInFlight: options.maxInFlight })

  let stopped: Promise<void> | undefined
  return {
    stop(graceMs) {
      if (stopped !== undefined) {
        if (graceMs === 0) runs.abortAll()
        return stopped
      }
      stopped = (async () => {
        await scheduleReconciler.stop()
        await scheduleInformer.stop()
        retention.stop()
        await runs.drain(graceMs)
        await runInformer?.stop()
        await gateInformer?.stop()
        await pipelineInformer?.stop()
        await pipelineReconciler.idle()
        await drivers.close()
        log("operator.stopped", {})
      })()
      return stopped
    },
  }
}
