import { createHash, randomBytes } from "node:crypto"
import { request as httpRequest, type IncomingMessage } from "node:http"
import { request as httpsRequest, type RequestOptions } from "node:https"
import { badRequest, errorMessage, SystemError } from "../../../lib/core/errors.ts"
import { ownerIsDead, processOwner } from "../../../lib/core/process-owner.ts"
import {
  ApiException,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Container,
  type V1OwnerReference,
  type V1Pod,
  type V1ResourceRequirements,
  type V1Volume,
  Watch,
} from "../../../lib/kube/client-node.js"
import {
  assertCacheKey,
  assertVolumeKind,
  type Driver,
  type DriverFactory,
  formatBytes,
  oomKilledNote,
  type RunDriver,
  type TaskExit,
  type TaskOutput,
  type TaskResources,
  type TaskSpec,
  type Volume,
  type VolumeOptions,
} from "../driver.ts"

/** What the composition code knows: where the API is, the namespace, and the server's flags for task Pods. */
export type KubernetesDefaults = {
  readonly kubeConfig: KubeConfig
  readonly namespace: string
  /** StorageClass of run volumes and caches; the cluster's default when absent. */
  readonly storageClass?: string | undefined
  /** Size a claim asks for, a Kubernetes quantity such as "1Gi". */
  readonly volumeSize: string
  /** ReadWriteOnce pins a run's Pods to the node of its first Pod; ReadWriteMany leaves them free. */
  readonly accessMode: "ReadWriteOnce" | "ReadWriteMany"
  /** How long a Pod may stay unschedulable before its task ends with the scheduler's reason. */
  readonly unschedulableTimeoutMs: number
}

/** Labels on every Pod, Secret and claim the driver creates; the owning process is an annotation (labels allow no ":"). */
export const kubernetesLabels = {
  managedBy: "app.kubernetes.io/managed-by",
  run: "runnel.dev/run",
  task: "runnel.dev/task",
  cache: "runnel.dev/cache",
  owner: "runnel.dev/owner",
  taskPath: "runnel.dev/task-path",
} as const

const managed = `${kubernetesLabels.managedBy}=runnel`
const container = "task"
const runnelGroup = "runnel.dev"
const runnelVersion = "v1alpha1"

/** Runs each task as a Pod of the Kubernetes API the operator uses (a cluster, or the embedded API's Docker node). */
export function kubernetesDriverFactory(defaults: KubernetesDefaults): DriverFactory {
  return {
    name: "kubernetes",
    create(config) {
      if (Object.keys(config).length > 0) {
        throw badRequest(
          `driver_config of the kubernetes driver takes no settings (got ${Object.keys(config).join(", ")}); the server's flags choose the cluster`,
        )
      }
      return new KubernetesDriver(defaults)
    },
  }
}

class KubernetesDriver implements Driver {
  readonly name = "kubernetes"
  readonly #cluster: Cluster

  constructor(defaults: KubernetesDefaults) {
    this.#cluster = new Cluster(defaults)
  }

  async open(runId: string): Promise<RunDriver> {
    return new KubernetesRun(this.#cluster, runId)
  }

  /** Pods, Secrets and claims whose creating process is dead: what a crashed operator left behind. */
  async removeLeftovers(): Promise<void> {
    const { core, namespace } = this.#cluster
    try {
      const dead = <T extends { metadata?: { annotations?: Record<string, string> } }>(items: T[]) =>
        items.filter((item) => ownerIsDead(item.metadata?.annotations?.[kubernetesLabels.owner]))
      const [pods, secrets, claims] = await Promise.all([
        core.listNamespacedPod({ namespace, labelSelector: managed }),
        core.listNamespacedSecret({ namespace, labelSelector: managed }),
        core.listNamespacedPersistentVolumeClaim({ namespace, labelSelector: `${managed},${kubernetesLabels.run}` }),
      ])
      await Promise.all([
        ...dead(pods.items).map((pod) => this.#cluster.deletePod(pod.metadata?.name ?? "")),
        ...dead(secrets.items).map((secret) =>
          ifGone(core.deleteNamespacedSecret({ namespace, name: secret.metadata?.name ?? "" })),
        ),
        ...dead(claims.items).map((claim) =>
          ifGone(core.deleteNamespacedPersistentVolumeClaim({ namespace, name: claim.metadata?.name ?? "" })),
        ),
      ])
    } catch (error) {
      throw this.#cluster.error(error, "removing the leftovers of crashed runnel processes failed")
    }
  }

  async close(): Promise<void> {}
}

/** The API clients and the settings every run shares. */
class Cluster {
  readonly core: CoreV1Api
  readonly objects: CustomObjectsApi
  readonly kubeConfig: KubeConfig
  readonly namespace: string
  readonly defaults: KubernetesDefaults
  /** Whether pods/log serves stdout and stderr apart (the `stream` parameter); asked once. */
  #splitStreams: Promise<boolean> | undefined

  constructor(defaults: KubernetesDefaults) {
    this.defaults = defaults
    this.kubeConfig = defaults.kubeConfig
    this.namespace = defaults.namespace
    this.core = defaults.kubeConfig.makeApiClient(CoreV1Api)
    this.objects = defaults.kubeConfig.makeApiClient(CustomObjectsApi)
  }

  get where(): string {
    return this.kubeConfig.getCurrentCluster()?.server ?? "the Kubernetes API"
  }

  /**
   * The `stream` parameter of pods/log is alpha in Kubernetes 1.32 (PodLogsQuerySplitStreams) and an API
   * server without it ignores it, serving both streams each time; so only a server that says it serves
   * it, the embedded API, is asked for the streams apart.
   */
  splitStreams(): Promise<boolean> {
    this.#splitStreams ??= this.#get("/version")
      .then((version) => /runnel\.embedded/.test(String((version as { gitVersion?: unknown }).gitVersion)))
      .catch(() => false)
    return this.#splitStreams
  }

  /** Deletes a Pod at once (grace 0): its containers are killed, then it goes; a Pod already gone is fine. */
  async deletePod(name: string, graceSeconds = 0): Promise<void> {
    await ifGone(this.core.deleteNamespacedPod({ namespace: this.namespace, name, gracePeriodSeconds: graceSeconds }))
  }

  /**
   * A GET of a path of the API as a streaming response, with the kubeconfig's credentials and TLS
   * settings (node:http(s): client-node's fetch dispatcher does not fit Node's own fetch).
   */
  async get(path: string, signal: AbortSignal): Promise<IncomingMessage> {
    const url = new URL(`${this.kubeConfig.getCurrentCluster()?.server ?? ""}${path}`)
    const options: RequestOptions = { method: "GET", signal, headers: {} }
    await this.kubeConfig.applyToHTTPSOptions(options)
    const send = url.protocol === "https:" ? httpsRequest : httpRequest
    return new Promise((resolve, reject) => {
      const request = send(url, options, resolve)
      request.on("error", reject)
      request.end()
    })
  }

  async #get(path: string): Promise<unknown> {
    const response = await this.get(path, AbortSignal.timeout(10_000))
    const body = Buffer.concat(await response.toArray()).toString("utf8")
    if (response.statusCode !== 200) throw new Error(`GET ${path}: ${response.statusCode}`)
    return JSON.parse(body)
  }

  /** A SystemError naming what failed and the API's own words. */
  error(error: unknown, what: string): Error {
    if (error instanceof SystemError) return error
    const code = (error as { code?: unknown; cause?: { code?: unknown } }).cause?.code
    if (code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "ENOENT") {
      return new SystemError(`cannot reach the Kubernetes API at ${this.where} (${String(code)})`, { cause: error })
    }
    return new SystemError(`${what}: ${apiReason(error)}`, { cause: error })
  }
}

type Claim = { readonly claimName: string; readonly cache: boolean }

class KubernetesRun implements RunDriver {
  readonly #cluster: Cluster
  readonly #runId: string
  readonly #claims = new Map<string, Claim>()
  #owner: Promise<V1OwnerReference | undefined> | undefined
  /**
   * With ReadWriteOnce claims, the node of the run's first Pod, once it is scheduled: the later Pods
   * wait for it and follow it there (a claim of that mode attaches to one node at a time), parallel
   * ones too. Undefined until a Pod is the first; reset when the first ends unscheduled.
   */
  #node: Promise<string | undefined> | undefined
  #used = false
  #closed = false
  #closing: Promise<void> | undefined

  constructor(cluster: Cluster, runId: string) {
    this.#cluster = cluster
    this.#runId = runId
  }

  async exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit> {
    signal.throwIfAborted()
    if (this.#closed) throw new SystemError(`task "${task.path}" was started after its run was closed`)
    const { core, namespace, defaults } = this.#cluster
    const startedAt = performance.now()
    const volumes = this.#volumes(task)
    const name = podName(this.#runId, task.path)
    const labels = this.#labels({ [kubernetesLabels.task]: labelValue(task.path) })
    const annotations = { [kubernetesLabels.owner]: processOwner, [kubernetesLabels.taskPath]: task.path }
    const owner = await this.#runOwner()
    signal.throwIfAborted() // the pinned wait below listens for an abort, which may have come already
    const pinned = defaults.accessMode === "ReadWriteOnce" && this.#claims.size > 0
    let scheduled: ((node: string | undefined) => void) | undefined
    let node: string | undefined
    if (pinned && this.#node === undefined) {
      const first = Promise.withResolvers<string | undefined>()
      this.#node = first.promise
      scheduled = (found) => {
        scheduled = undefined
        if (found === undefined) this.#node = undefined // let the next Pod be the first
        first.resolve(found)
      }
    } else if (pinned) {
      const aborted = new Promise<never>((_, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason), { once: true }),
      )
      aborted.catch(() => {})
      node = await Promise.race([this.#node, aborted])
    }
    this.#used = true
    const env = Object.keys(task.env)
    // Values (secrets among them) live in a Secret the Pod references, never in the Pod's spec.
    if (env.length > 0) {
      const stringData = Object.fromEntries(env.map((key, index) => [secretKey(key, index), task.env[key] as string]))
      await core
        .createNamespacedSecret({ namespace, body: { metadata: { name, labels, annotations }, stringData } })
        .catch((error: unknown) => {
          scheduled?.(undefined)
          throw this.#cluster.error(error, `the environment of task "${task.path}" could not be stored`)
        })
    }
    const pod: V1Pod = {
      metadata: { name, labels, annotations, ...(owner === undefined ? {} : { ownerReferences: [owner] }) },
      spec: {
        restartPolicy: "Never",
        automountServiceAccountToken: false,
        enableServiceLinks: false,
        terminationGracePeriodSeconds: 2,
        ...(node === undefined ? {} : { affinity: nodeAffinity(node) }),
        containers: [taskContainer(task, name, volumes.mounts)],
        volumes: volumes.volumes,
      },
    }
    let created: V1Pod
    try {
      created = await core.createNamespacedPod({ namespace, body: pod })
    } catch (error) {
      scheduled?.(undefined)
      if (env.length > 0) await ifGone(core.deleteNamespacedSecret({ namespace, name })).catch(() => {})
      throw this.#cluster.error(error, `task "${task.path}" could not be created as a Pod`)
    }
    const watch = new PodWatch(this.#cluster, name)
    const stop = () => void this.#cluster.deletePod(name).catch(() => {})
    signal.addEventListener("abort", stop)
    let timer: NodeJS.Timeout | undefined
    let timedOut = false
    try {
      // Aborted while the Pod was being created: the listener came too late, and the Pod goes in `finally`.
      signal.throwIfAborted()
      if (env.length > 0) await this.#ownSecret(name, created)
      await watch.start()
      const remaining = task.timeoutMs === undefined ? undefined : task.timeoutMs - (performance.now() - startedAt)
      const timeout = new Promise<never>((_, reject) => {
        if (remaining === undefined) return
        timer = setTimeout(
          () => {
            timedOut = true
            stop()
            reject(new TimedOut())
          },
          Math.max(0, remaining),
        )
      })
      timeout.catch(() => {})
      const runs = (found: V1Pod) => {
        if (found.spec?.nodeName) scheduled?.(found.spec.nodeName)
        return runsOrEnded(found, task, defaults)
      }
      await Promise.race([watch.until(runs), timeout])
      await Promise.race([this.#streamLogs(name, output, signal), timeout])
      const ended = await Promise.race([watch.until((found) => terminated(found)), timeout])
      signal.throwIfAborted()
      return { code: exitOf(ended, output, task.resources), timedOut: false }
    } catch (error) {
      if (signal.aborted) throw signal.reason
      if (timedOut || error instanceof TimedOut) return { code: 137, timedOut: true }
      throw this.#cluster.error(error, `task "${task.path}" failed as Pod "${name}"`)
    } finally {
      scheduled?.(undefined)
      clearTimeout(timer)
      signal.removeEventListener("abort", stop)
      watch.stop()
      // The Secret goes with it (it is owned by the Pod); close() removes whatever carries the run's label.
      await this.#cluster.deletePod(name).catch(() => {})
      if (env.length > 0) await ifGone(core.deleteNamespacedSecret({ namespace, name })).catch(() => {})
    }
  }

  async createVolume(name: string, options: VolumeOptions = {}): Promise<Volume> {
    const cache = options.cache === true
    if (cache) assertCacheKey(name)
    if (this.#closed) throw new SystemError(`volume "${name}" was requested after its run was closed`)
    assertVolumeKind(name, cache, this.#claims.get(name)?.cache)
    const { core, namespace, defaults } = this.#cluster
    const claimName = cache ? cacheClaimName(name) : objectName(`runnel-${this.#runId}`, name)
    const labels = cache
      ? { [kubernetesLabels.managedBy]: "runnel", [kubernetesLabels.cache]: labelValue(name) }
      : this.#labels({})
    const annotations: Record<string, string> = cache ? {} : { [kubernetesLabels.owner]: processOwner }
    this.#used = true
    try {
      await core.createNamespacedPersistentVolumeClaim({
        namespace,
        body: {
          metadata: { name: claimName, labels, annotations },
          spec: {
            accessModes: [defaults.accessMode],
            resources: { requests: { storage: defaults.volumeSize } },
            ...(defaults.storageClass === undefined ? {} : { storageClassName: defaults.storageClass }),
          },
        },
      })
    } catch (error) {
      // An existing claim of that name is how a cache is found again.
      if (!(error instanceof ApiException && error.code === 409)) {
        throw this.#cluster.error(error, `${cache ? "cache" : "volume"} "${name}" could not be created`)
      }
    }
    this.#claims.set(name, { claimName, cache })
    return { name }
  }

  close(): Promise<void> {
    this.#closed = true
    this.#closing ??= this.#removeAll().catch((error: unknown) => {
      this.#closing = undefined
      throw error
    })
    return this.#closing
  }

  async #removeAll(): Promise<void> {
    if (!this.#used) return
    const { core, namespace } = this.#cluster
    const labelSelector = `${managed},${kubernetesLabels.run}=${labelValue(this.#runId)}`
    try {
      const pods = await core.listNamespacedPod({ namespace, labelSelector })
      await Promise.all(pods.items.map((pod) => this.#cluster.deletePod(pod.metadata?.name ?? "")))
      await core.deleteCollectionNamespacedSecret({ namespace, labelSelector })
      await core.deleteCollectionNamespacedPersistentVolumeClaim({ namespace, labelSelector })
    } catch (error) {
      throw this.#cluster.error(error, `the Pods and claims of run "${this.#runId}" could not be removed`)
    }
  }

  #labels(more: Record<string, string>): Record<string, string> {
    return { [kubernetesLabels.managedBy]: "runnel", [kubernetesLabels.run]: labelValue(this.#runId), ...more }
  }

  /** The Run this run is, as the owner of its Pods; none when the API has no such Run (`runnel runner`, tests). */
  #runOwner(): Promise<V1OwnerReference | undefined> {
    this.#owner ??= this.#cluster.objects
      .getNamespacedCustomObject({
        group: runnelGroup,
        version: runnelVersion,
        namespace: this.#cluster.namespace,
        plural: "runs",
        name: this.#runId,
      })
      .then((run: { metadata?: { uid?: string } }) => ({
        apiVersion: `${runnelGroup}/${runnelVersion}`,
        kind: "Run",
        name: this.#runId,
        uid: run.metadata?.uid ?? "",
        controller: true,
        blockOwnerDeletion: true,
      }))
      .catch(() => undefined)
    return this.#owner
  }

  /** Makes the task's Secret owned by its Pod, so that it goes with it. */
  async #ownSecret(name: string, pod: V1Pod): Promise<void> {
    const ownerReferences = [{ apiVersion: "v1", kind: "Pod", name, uid: pod.metadata?.uid ?? "" }]
    await this.#cluster.core.patchNamespacedSecret(
      { namespace: this.#cluster.namespace, name, body: { metadata: { ownerReferences } } },
      mergePatch,
    )
  }

  #volumes(task: TaskSpec): { volumes: V1Volume[]; mounts: { name: string; mountPath: string }[] } {
    const volumes: V1Volume[] = []
    const mounts: { name: string; mountPath: string }[] = []
    for (const [index, [path, volume]] of Object.entries(task.mounts).entries()) {
      const claim = this.#claims.get(volume.name)
      if (claim === undefined) {
        throw new SystemError(`task "${task.path}" mounts volume "${volume.name}", which its run did not create`)
      }
      const name = `v${index}`
      volumes.push({ name, persistentVolumeClaim: { claimName: claim.claimName } })
      mounts.push({ name, mountPath: path })
    }
    return { volumes, mounts }
  }

  /** Follows the container's output from its first byte, stdout and stderr apart where the API serves them so. */
  async #streamLogs(name: string, output: TaskOutput, signal: AbortSignal): Promise<void> {
    const base = `/api/v1/namespaces/${this.#cluster.namespace}/pods/${name}/log?container=${container}&follow=true`
    if (await this.#cluster.splitStreams()) {
      await Promise.all([
        this.#follow(`${base}&stream=Stdout`, (chunk) => output.stdout(chunk), signal),
        this.#follow(`${base}&stream=Stderr`, (chunk) => output.stderr(chunk), signal),
      ])
      return
    }
    output.stderr(
      Buffer.from("runnel: this Kubernetes API serves a Pod's stdout and stderr as one stream; both are in stdout\n"),
    )
    await this.#follow(base, (chunk) => output.stdout(chunk), signal)
  }

  /**
   * Reads one log stream to its end. A connection cut midway (seen under load) is opened again from the
   * first byte, and what was already delivered is skipped, a few times at most.
   */
  async #follow(path: string, deliver: (chunk: Buffer) => void, signal: AbortSignal): Promise<void> {
    let delivered = 0
    for (let attempt = 1; ; attempt++) {
      let skip = delivered
      try {
        const response = await this.#cluster.get(path, signal)
        if (response.statusCode !== 200) {
          const body = Buffer.concat(await response.toArray()).toString("utf8")
          throw new SystemError(`the output could not be read: ${response.statusCode} ${apiReason(body)}`)
        }
        for await (const chunk of response as AsyncIterable<Buffer>) {
          const fresh = skip >= chunk.length ? undefined : chunk.subarray(skip)
          skip = Math.max(0, skip - chunk.length)
          if (fresh === undefined) continue
          delivered += fresh.length
          deliver(fresh)
        }
        return
      } catch (error) {
        if (signal.aborted || error instanceof SystemError || attempt === 3) throw error
      }
    }
  }
}

class TimedOut extends Error {}

/** Watches one Pod; until() resolves with it once a check holds, rejects when the Pod is deleted or a check throws. */
/**
 * The latest state of one Pod, from a watch opened again whenever it ends: a server closes watches
 * at its own timeout, and client-node gives up on one silent for 30 s, which a long task's Pod is.
 * It is opened again from a fresh read of the Pod, so a change in between is not missed.
 */
class PodWatch {
  readonly #cluster: Cluster
  readonly #name: string
  #latest: V1Pod | undefined
  #gone = false
  #failure: Error | undefined
  #waiters = new Set<() => void>()
  #controller: AbortController | undefined
  #stopped = false
  /** Reads of the Pod that failed in a row while opening the watch again. */
  #failedReads = 0

  constructor(cluster: Cluster, name: string) {
    this.#cluster = cluster
    this.#name = name
  }

  start(): Promise<void> {
    return this.#open(undefined)
  }

  async #open(resourceVersion: string | undefined): Promise<void> {
    const path = `/api/v1/namespaces/${this.#cluster.namespace}/pods`
    const query = {
      fieldSelector: `metadata.name=${this.#name}`,
      allowWatchBookmarks: true,
      ...(resourceVersion === undefined ? {} : { resourceVersion }),
    }
    let ended = false
    const end = (error: unknown) => {
      if (ended) return
      ended = true
      void this.#reopen(error)
    }
    this.#controller = await new Watch(this.#cluster.kubeConfig).watch(
      path,
      query,
      (type, object: V1Pod) => {
        if (type === "BOOKMARK") return
        // 410 Expired: the version it resumed from is gone; the next read starts afresh.
        if (type === "ERROR") return end(new Error((object as { message?: string }).message ?? "the watch failed"))
        if (type === "DELETED") this.#gone = true
        else this.#latest = object
        this.#wake()
      },
      (error) => end(error),
    )
    if (this.#stopped) this.#controller.abort()
  }

  async #reopen(error: unknown): Promise<void> {
    if (this.#stopped || this.#gone) return
    for (;;) {
      try {
        const pod = await ifGone(
          this.#cluster.core.readNamespacedPod({ namespace: this.#cluster.namespace, name: this.#name }),
        )
        this.#failedReads = 0
        if (this.#stopped) return
        if (pod === undefined) this.#gone = true
        else this.#latest = pod
        this.#wake()
        if (pod !== undefined) await this.#open(pod.metadata?.resourceVersion)
        return
      } catch (failure) {
        if (this.#stopped) return
        if (++this.#failedReads >= 3) {
          const cause = error instanceof Error && error.name !== "AbortError" ? error : failure
          this.#failure = cause instanceof Error ? cause : new Error(String(cause))
          this.#wake()
          return
        }
        await new Promise((resolve) => setTimeout(resolve, 500 * this.#failedReads))
      }
    }
  }

  /** Checks on every event, and each second too: a check may hold with time alone (an unschedulable timeout). */
  until(check: (pod: V1Pod) => boolean): Promise<V1Pod> {
    return new Promise((resolve, reject) => {
      const settle = (settled: () => void) => {
        this.#waiters.delete(test)
        clearInterval(ticker)
        settled()
      }
      const test = () => {
        try {
          const latest = this.#latest
          if (latest !== undefined && check(latest)) settle(() => resolve(latest))
          else if (this.#gone || this.#failure !== undefined) {
            settle(() =>
              reject(this.#failure ?? new SystemError(`Pod "${this.#name}" was deleted before its task ended`)),
            )
          }
        } catch (error) {
          settle(() => reject(error))
        }
      }
      const ticker = setInterval(test, 1000)
      this.#waiters.add(test)
      test()
    })
  }

  stop(): void {
    this.#stopped = true
    this.#controller?.abort()
  }

  #wake() {
    for (const waiter of [...this.#waiters]) waiter()
  }
}

/**
 * True once the container runs or has ended; throws the failures a user can act on: an image that
 * cannot be pulled, a Pod unschedulable for longer than the timeout.
 */
function runsOrEnded(pod: V1Pod, task: TaskSpec, defaults: KubernetesDefaults): boolean {
  const state = pod.status?.containerStatuses?.[0]?.state
  if (state?.running !== undefined || state?.terminated !== undefined) return true
  if (pod.status?.phase === "Failed" || pod.status?.phase === "Succeeded") return true
  const waiting = state?.waiting
  if (
    waiting?.reason === "ErrImagePull" ||
    waiting?.reason === "ImagePullBackOff" ||
    waiting?.reason === "InvalidImageName"
  ) {
    throw new SystemError(
      `image "${task.image}" could not be pulled (${waiting.reason}): ${waiting.message ?? "no message"}`,
    )
  }
  if (waiting?.reason === "CreateContainerError") {
    throw new SystemError(`task "${task.path}" could not be created: ${waiting.message ?? "no message"}`)
  }
  const scheduled = pod.status?.conditions?.find((condition) => condition.type === "PodScheduled")
  if (scheduled?.status === "False" && scheduled.reason === "Unschedulable") {
    const since = new Date(scheduled.lastTransitionTime ?? pod.metadata?.creationTimestamp ?? Date.now()).getTime()
    if (Date.now() - since >= defaults.unschedulableTimeoutMs) {
      throw new SystemError(
        `task "${task.path}" could not be scheduled within ${defaults.unschedulableTimeoutMs / 1000} s: ${scheduled.message ?? "no reason given"}`,
      )
    }
  }
  return false
}

function terminated(pod: V1Pod): boolean {
  if (pod.status?.phase === "Failed" && pod.status.reason === "Evicted") return true
  return pod.status?.containerStatuses?.[0]?.state?.terminated !== undefined
}

/** The exit code; an OOM kill or an eviction is said on stderr, and a start failure rejects with its reason. */
function exitOf(pod: V1Pod, output: TaskOutput, resources: TaskResources | undefined): number {
  const ended = pod.status?.containerStatuses?.[0]?.state?.terminated
  if (ended === undefined) {
    output.stderr(Buffer.from(`runnel: the Pod was evicted: ${pod.status?.message ?? pod.status?.reason ?? ""}\n`))
    return 137
  }
  // ContainerStatusUnknown: the container's runtime lost it (the embedded API's Docker daemon went away).
  if (
    ended.reason === "StartError" ||
    ended.reason === "ContainerCannotRun" ||
    ended.reason === "ContainerStatusUnknown"
  ) {
    throw new SystemError(ended.message ?? `the container could not start (${ended.reason})`)
  }
  if (ended.reason === "OOMKilled") output.stderr(oomKilledNote(resources))
  return ended.exitCode
}

function taskContainer(task: TaskSpec, secretName: string, mounts: { name: string; mountPath: string }[]): V1Container {
  return {
    name: container,
    image: task.image,
    command: [task.command.path],
    args: [...task.command.args],
    ...(task.workDir === undefined ? {} : { workingDir: task.workDir }),
    env: Object.keys(task.env).map((key, index) => ({
      name: key,
      valueFrom: { secretKeyRef: { name: secretName, key: secretKey(key, index) } },
    })),
    volumeMounts: mounts,
    ...(task.resources === undefined ? {} : { resources: containerResources(task.resources) }),
    // A privileged container has every capability and no seccomp filter anyway; Kubernetes refuses
    // privileged with allowPrivilegeEscalation false.
    securityContext:
      task.privileged === true
        ? { privileged: true }
        : {
            allowPrivilegeEscalation: false,
            capabilities: { drop: ["ALL"] },
            seccompProfile: { type: "RuntimeDefault" },
          },
  }
}

/**
 * A task's limits as requests and limits: cpu and memory limits are requested too (the scheduler
 * places the Pod where they fit); shares, a weight without a cap, become a cpu request alone, which
 * a kubelet turns into the same cgroup weight (1024 shares for 1000m).
 */
function containerResources(resources: TaskResources): V1ResourceRequirements {
  const requests: Record<string, string> = {}
  const limits: Record<string, string> = {}
  if (resources.cpuShares !== undefined) {
    requests.cpu = `${Math.max(1, Math.round((resources.cpuShares * 1000) / 1024))}m`
  }
  if (resources.cpuMillis !== undefined) {
    requests.cpu = `${resources.cpuMillis}m`
    limits.cpu = requests.cpu
  }
  if (resources.memoryBytes !== undefined) {
    requests.memory = formatBytes(resources.memoryBytes)
    limits.memory = requests.memory
  }
  return { requests, ...(Object.keys(limits).length === 0 ? {} : { limits }) }
}

function nodeAffinity(node: string) {
  return {
    nodeAffinity: {
      requiredDuringSchedulingIgnoredDuringExecution: {
        nodeSelectorTerms: [{ matchFields: [{ key: "metadata.name", operator: "In", values: [node] }] }],
      },
    },
  }
}

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch)

/** A Secret key for an env name: the name when Kubernetes allows it as a key. */
function secretKey(name: string, index: number): string {
  return /^[-._a-zA-Z0-9]+$/.test(name) ? name : `env-${index}`
}

/** A label value (63 characters of [a-z0-9A-Z-_.], alphanumeric at both ends) for any text, a hash where it had to change. */
function labelValue(text: string): string {
  if (/^[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?$/.test(text)) return text
  const kept = text.replace(/[^a-zA-Z0-9_.-]/g, "-").slice(0, 50)
  return `${kept}-${hash(text)}`.replace(/^[^a-zA-Z0-9]+/, "")
}

/** A DNS-1123 name `prefix-text`, the text kept readable, a hash where it had to change or was cut. */
function objectName(prefix: string, text: string): string {
  const plain = `${prefix}-${text}`
  if (/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(plain) && plain.length <= 63) return plain
  const kept = plain
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "-")
    .slice(0, 52)
    .replace(/-+$/, "")
  return `${kept}-${hash(text)}`
}

/** The claim that holds the cache `key`, the same for every run. */
export const cacheClaimName = (key: string) => objectName("runnel-cache", key)

/** A Pod name per exec: the run and task, and a random part, since a task may be run again. */
function podName(runId: string, path: string): string {
  return objectName(runId, `${path}-${randomBytes(3).toString("hex")}`)
}

const hash = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 10)

async function ifGone<T>(request: Promise<T>): Promise<T | undefined> {
  try {
    return await request
  } catch (error) {
    if (error instanceof ApiException && error.code === 404) return undefined
    throw error
  }
}

/** The API's own message from a refusal's Status, else the error's. */
function apiReason(error: unknown): string {
  if (typeof error === "string") return (safeJson(error) as { message?: string } | undefined)?.message ?? error
  if (error instanceof ApiException) {
    const body = typeof error.body === "string" ? safeJson(error.body) : error.body
    const message = (body as { message?: unknown } | undefined)?.message
    if (typeof message === "string") return message
  }
  return errorMessage(error)
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}
