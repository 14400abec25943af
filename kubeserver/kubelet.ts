import {
  type ContainerSecurity,
  type ContainerSpec,
  type DockerHost,
  ImagePullError,
} from "../lib/containers/docker-host.ts"
import type { ApiResponse } from "./http-exchange.ts"
import { badRequest, invalid, KubeStatusError, notFound } from "./kube-status.ts"
import type { KubeObject } from "./object-meta.ts"
import type { StoredEvent } from "./object-store.ts"
import { quantity } from "./pod-resources.ts"
import type { ResourceApi } from "./resource-api.ts"
import { namespaceType, persistentVolumeClaimType, podType, secretType, storageResource } from "./resource-types.ts"
import { isObject } from "./schema.ts"

/** Labels on what the kubelet creates in Docker; `cluster` keeps two embedded APIs on one daemon apart. */
export const kubeletLabels = {
  cluster: "dev.runnel.kube.cluster",
  pod: "dev.runnel.kube.pod",
  container: "dev.runnel.kube.container",
  claim: "dev.runnel.kube.claim",
} as const

type Json = Record<string, unknown>
type ContainerState =
  | { waiting: { reason: string; message?: string } }
  | { running: { startedAt: string } }
  | {
      terminated: {
        exitCode: number
        reason: string
        message?: string
        startedAt?: string
        finishedAt?: string
        containerID?: string
      }
    }
type ContainerStatus = {
  name: string
  image: string
  imageID: string
  ready: boolean
  restartCount: number
  started: boolean
  state: ContainerState
  containerID?: string
}
type Condition = {
  type: string
  status: "True" | "False"
  reason?: string
  message?: string
  lastTransitionTime: string
}

const podResource = storageResource(podType)
const claimResource = storageResource(persistentVolumeClaimType)
const retryMs = 2000
const now = () => new Date().toISOString().replace(/\.\d+Z$/, "Z")
const objectOf = (value: unknown): Json => (isObject(value) ? (value as Json) : {})
const listOf = (value: unknown): Json[] =>
  Array.isArray(value) ? value.filter(isObject).map((item) => item as Json) : []
const stringsOf = (value: unknown): string[] => (Array.isArray(value) ? value.map(String) : [])

/** A Pod's work on the node: stopped by aborting it. */
type PodWork = { readonly abort: AbortController; done: Promise<void> }

/**
 * The embedded API's one node: a scheduler and a kubelet in one, running
 * Pods as Docker containers through lib/containers. It watches the store's
 * Pods and claims and writes what a kubelet writes: `spec.nodeName`, and a
 * status with phase, conditions and container states.
 * - With no Docker daemon a Pod stays Pending with `PodScheduled=False`,
 *   reason `Unschedulable`, and is scheduled once a daemon answers.
 * - `restartPolicy` is taken as `Never`: a container that ends is not restarted.
 * - Containers keep their output in the daemon (the `json-file` log driver) until
 *   the Pod is deleted, for `pods/log`.
 */
export class Kubelet {
  readonly nodeName: string
  readonly #api: ResourceApi
  readonly #docker: DockerHost
  readonly #cluster: string
  readonly #pods = new Map<string, PodWork>()
  readonly #stopping = new Map<string, Promise<void>>()
  #closed = false
  #unsubscribe: () => void

  constructor(api: ResourceApi, docker: DockerHost, nodeName: string) {
    this.#api = api
    this.#docker = docker
    this.nodeName = nodeName
    // The kube-system namespace lives as long as the store: its uid names this cluster's containers.
    this.#cluster = api.get(namespaceType, undefined, "kube-system").metadata.uid ?? ""
    this.#unsubscribe = api.store.subscribe((event) => this.#observe(event))
    void this.#resync()
  }

  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#unsubscribe()
    for (const work of this.#pods.values()) work.abort.abort(new Error("the embedded API is closing"))
  }

  /** Resolves when every Pod being stopped is gone from Docker. */
  async idle(): Promise<void> {
    await Promise.all([...this.#stopping.values()])
  }

  #observe(event: StoredEvent) {
    if (this.#closed) return
    if (event.resource === claimResource) {
      if (event.type === "ADDED") void this.#bindClaim(event.object)
      if (event.type === "DELETED") void this.#removeClaimVolume(event.object.metadata.uid ?? "")
      return
    }
    if (event.resource !== podResource) return
    const pod = event.object
    const uid = pod.metadata.uid ?? ""
    if (event.type === "DELETED") this.#stop(pod, 0, false)
    else if (pod.metadata.deletionTimestamp !== undefined) {
      this.#stop(pod, pod.metadata.deletionGracePeriodSeconds ?? 0, true)
    } else if (!this.#pods.has(uid) && !this.#stopping.has(uid) && !finished(pod)) this.#start(pod)
  }

  /** After a restart: Pods to run, Pods to finish deleting, and containers and volumes nobody owns any more. */
  async #resync() {
    const pods = [...this.#api.store.list(podResource, undefined)]
    const claims = [...this.#api.store.list(claimResource, undefined)]
    const podUids = new Set(pods.map((pod) => pod.metadata.uid))
    for (const claim of claims) void this.#bindClaim(claim)
    try {
      const clusterLabel = `${kubeletLabels.cluster}=${this.#cluster}`
      for (const container of await this.#docker.containers(clusterLabel)) {
        if (!podUids.has(container.labels[kubeletLabels.pod])) await this.#docker.remove(container.id)
      }
      const claimUids = new Set(claims.map((claim) => claim.metadata.uid))
      for (const volume of await this.#docker.volumes(clusterLabel)) {
        const pod = volume.labels[kubeletLabels.pod]
        const claim = volume.labels[kubeletLabels.claim]
        if ((pod !== undefined && !podUids.has(pod)) || (claim !== undefined && !claimUids.has(claim))) {
          await this.#docker.removeVolume(volume.name).catch(() => {})
        }
      }
    } catch {
      // No daemon: nothing of ours can be running on it.
    }
    for (const pod of pods) {
      const key = { resource: podResource, namespace: "", name: "" }
      this.#observe({ type: "ADDED", version: 0, ...key, object: pod, previous: undefined })
    }
  }

  #start(pod: KubeObject) {
    const uid = pod.metadata.uid ?? ""
    const work: PodWork = { abort: new AbortController(), done: Promise.resolve() }
    this.#pods.set(uid, work)
    work.done = new PodRun(this.#api, this.#docker, this, pod, this.#cluster, work.abort.signal)
      .run()
      .catch(() => {}) // a Pod deleted midway: its status writes find it gone
      .finally(() => {
        if (this.#pods.get(uid) === work) this.#pods.delete(uid)
      })
  }

  /** Stops a Pod's containers within `graceSeconds`, removes them and its emptyDir volumes, then the Pod object. */
  #stop(pod: KubeObject, graceSeconds: number, deleteObject: boolean) {
    const uid = pod.metadata.uid ?? ""
    const previous = this.#stopping.get(uid)
    const stopping = (async () => {
      const work = this.#pods.get(uid)
      work?.abort.abort(new Error("the Pod is being deleted"))
      await previous
      const label = `${kubeletLabels.pod}=${uid}`
      try {
        const containers = await this.#docker.containers(label)
        await Promise.all(containers.map((container) => this.#docker.stop(container.id, graceSeconds)))
        await work?.done
        for (const container of await this.#docker.containers(label)) await this.#docker.remove(container.id)
        for (const volume of await this.#docker.volumes(label)) await this.#docker.removeVolume(volume.name)
      } catch {
        // No daemon: it holds nothing of this Pod.
      }
      if (deleteObject) {
        try {
          this.#api.delete(podType, pod.metadata.namespace, pod.metadata.name ?? "", {
            gracePeriodSeconds: 0,
            preconditions: { uid },
          })
        } catch (error) {
          if (!(error instanceof KubeStatusError)) throw error
        }
      }
      if (claimNames(pod).length > 0) await this.#removeUnclaimedVolumes()
    })().finally(() => {
      if (this.#stopping.get(uid) === stopping) this.#stopping.delete(uid)
    })
    this.#stopping.set(uid, stopping)
  }

  /** A claim is a Docker volume on this node, made when the claim is; Bound once it exists. */
  async #bindClaim(claim: KubeObject) {
    if (objectOf(claim.status).phase === "Bound") return
    try {
      await this.#docker.createVolume(claimVolume(claim.metadata.uid ?? ""), {
        [kubeletLabels.cluster]: this.#cluster,
        [kubeletLabels.claim]: claim.metadata.uid ?? "",
      })
    } catch {
      return // no daemon: the claim stays Pending, as one no provisioner serves
    }
    const spec = objectOf(claim.spec)
    const status = {
      phase: "Bound",
      accessModes: spec.accessModes,
      capacity: { storage: objectOf(objectOf(objectOf(spec.resources).requests)).storage },
    }
    try {
      this.#api.update(
        persistentVolumeClaimType,
        claim.metadata.namespace,
        claim.metadata.name ?? "",
        { ...claim, metadata: { ...claim.metadata, resourceVersion: undefined }, status },
        { subresource: "status" },
      )
    } catch (error) {
      if (!(error instanceof KubeStatusError)) throw error
    }
  }

  /** A deleted claim's volume goes once no container uses it; a Pod still using it removes it when it stops. */
  async #removeClaimVolume(uid: string) {
    await this.#docker.removeVolume(claimVolume(uid)).catch(() => {})
  }

  /** Removes the volumes of claims that are gone (their last Pod has just stopped). */
  async #removeUnclaimedVolumes() {
    const claims = new Set([...this.#api.store.list(claimResource, undefined)].map((claim) => claim.metadata.uid))
    for (const volume of await this.#docker.volumes(`${kubeletLabels.cluster}=${this.#cluster}`)) {
      const claim = volume.labels[kubeletLabels.claim]
      if (claim !== undefined && !claims.has(claim)) await this.#removeClaimVolume(claim)
    }
  }

  /**
   * `GET pods/NAME/log`: the output Docker kept for one container of the Pod, as text;
   * with `follow`, until the container ends.
   */
  async serveLogs(namespace: string, name: string, query: URLSearchParams, res: ApiResponse): Promise<void> {
    const pod = this.#api.get(podType, namespace, name)
    const containers = listOf(objectOf(pod.spec).containers).map((container) => String(container.name))
    const asked = query.get("container") ?? undefined
    if (asked === undefined && containers.length > 1) {
      throw badRequest(`a container name must be specified for pod ${name}, choose one of: [${containers.join(" ")}]`)
    }
    const container = asked ?? containers[0] ?? ""
    if (!containers.includes(container)) throw badRequest(`container ${container} is not valid for pod ${name}`)
    const options = logOptions(name, query)
    const status = listOf(objectOf(pod.status).containerStatuses).find((entry) => entry.name === container)
    const state = objectOf(status?.state)
    if (state.running === undefined && state.terminated === undefined) {
      const reason = String(objectOf(state.waiting).reason ?? "ContainerCreating")
      throw badRequest(`container "${container}" in pod "${name}" is waiting to start: ${reason}`)
    }
    const [found] = await this.#docker
      .containers(`${kubeletLabels.pod}=${pod.metadata.uid}`)
      .then((all) => all.filter((entry) => entry.labels[kubeletLabels.container] === container))
      // The daemon went away (a log follow that ended with it is asked again): said as such, not as "read ECONNRESET".
      .catch((error: unknown) => {
        throw this.#docker.error(error, `the log of container "${container}" in pod "${name}" could not be read`)
      })
    if (found === undefined) throw notFound({ group: "", resource: "pods/log" }, name)
    res.writeHead(200, { "Content-Type": "text/plain", "Cache-Control": "no-cache, private" })
    res.flushHeaders()
    const stop = new AbortController()
    res.on("close", () => stop.abort())
    if (res.closed) stop.abort() // it left while the container was looked up
    let left = options.limitBytes ?? Number.POSITIVE_INFINITY
    let sent = 0
    const write = (chunk: Buffer) => {
      sent += chunk.length
      if (left <= 0) return
      const part = chunk.length > left ? chunk.subarray(0, left) : chunk
      left -= part.length
      res.write(part)
      if (left <= 0) stop.abort()
    }
    try {
      await this.#docker.logs(found.id, options, { stdout: write, stderr: write }, stop.signal)
      // Docker's follow can end when the container does while the reader is behind (seen: 1.4 of 20 MB
      // for a slow reader): the rest is read without follow, after the bytes already sent.
      if (options.follow && options.tail === undefined && !stop.signal.aborted) {
        let skip = sent
        const rest = (chunk: Buffer) => {
          if (skip >= chunk.length) skip -= chunk.length
          else {
            write(chunk.subarray(skip))
            skip = 0
          }
        }
        await this.#docker.logs(found.id, { ...options, follow: false }, { stdout: rest, stderr: rest }, stop.signal)
      }
    } catch {
      // The container went midway (the Pod was deleted): the log ends there, as with a real kubelet.
    }
    res.end()
  }
}

/** One Pod's life on the node: scheduled, volumes ready, containers created, started, waited for. */
class PodRun {
  readonly #api: ResourceApi
  readonly #docker: DockerHost
  readonly #kubelet: Kubelet
  readonly #pod: KubeObject
  readonly #cluster: string
  readonly #signal: AbortSignal
  readonly #statuses: ContainerStatus[]
  #conditions: Condition[] = []
  #startTime: string | undefined
  #phase = "Pending"

  constructor(
    api: ResourceApi,
    docker: DockerHost,
    kubelet: Kubelet,
    pod: KubeObject,
    cluster: string,
    signal: AbortSignal,
  ) {
    this.#api = api
    this.#docker = docker
    this.#kubelet = kubelet
    this.#pod = pod
    this.#cluster = cluster
    this.#signal = signal
    const previous = listOf(objectOf(pod.status).containerStatuses) as unknown as ContainerStatus[]
    this.#statuses = containersOf(pod).map(
      (container) =>
        previous.find((status) => status.name === container.name) ?? {
          name: String(container.name),
          image: String(container.image),
          imageID: "",
          ready: false,
          restartCount: 0,
          started: false,
          state: { waiting: { reason: "ContainerCreating" } },
        },
    )
  }

  async run(): Promise<void> {
    const spec = objectOf(this.#pod.spec)
    if (spec.nodeName !== this.#kubelet.nodeName) await this.#schedule()
    this.#startTime ??= String(objectOf(this.#pod.status).startTime ?? now())
    this.#condition("PodScheduled", "True")
    this.#condition("Initialized", "True")
    this.#condition("ContainersReady", "False", "ContainersNotReady")
    this.#condition("Ready", "False", "ContainersNotReady")
    this.#write("Pending")
    await Promise.all(containersOf(this.#pod).map((container, index) => this.#runContainer(container, index)))
    // A container that could not be created stays waiting with its reason, and the Pod Pending, as with a kubelet.
    if (this.#statuses.some((status) => !("terminated" in status.state))) return
    const failed = this.#statuses.some(
      (status) => "terminated" in status.state && status.state.terminated.exitCode !== 0,
    )
    this.#condition("ContainersReady", "False", "PodCompleted")
    this.#condition("Ready", "False", "PodCompleted")
    this.#write(failed ? "Failed" : "Succeeded")
  }

  /** Binds the Pod to the node once Docker answers and its claims exist; until then it is Unschedulable. */
  async #schedule() {
    for (;;) {
      const reason = await this.#unschedulable()
      if (reason === undefined) break
      this.#condition("PodScheduled", "False", "Unschedulable", reason)
      this.#write("Pending")
      await sleep(retryMs, this.#signal)
    }
    const { namespace, name } = this.#pod.metadata
    const current = this.#api.get(podType, namespace, name ?? "")
    if (current.metadata.uid !== this.#pod.metadata.uid) throw new Error("the Pod was replaced")
    const bound = { ...current, spec: { ...objectOf(current.spec), nodeName: this.#kubelet.nodeName } }
    this.#api.update(podType, namespace, name ?? "", bound)
  }

  /** Why the Pod cannot be scheduled, in the scheduler's words; undefined when it can. */
  async #unschedulable(): Promise<string | undefined> {
    if (!(await this.#docker.ping())) {
      return `0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }: the Docker daemon at ${this.#docker.where} does not answer. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.`
    }
    if (!affinityAllows(this.#pod, this.#kubelet.nodeName)) {
      return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    }
    for (const claim of claimNames(this.#pod)) {
      const key = { resource: claimResource, namespace: this.#pod.metadata.namespace ?? "", name: claim }
      if (this.#api.store.get(key) === undefined) {
        return `0/1 nodes are available: persistentvolumeclaim "${claim}" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.`
      }
    }
    return undefined
  }

  async #runContainer(container: Json, index: number) {
    const status = this.#statuses[index] as ContainerStatus
    if ("terminated" in status.state) return
    const name = String(container.name)
    const label = `${kubeletLabels.pod}=${this.#pod.metadata.uid}`
    const existing = (await this.#docker.containers(label)).find(
      (found) => found.labels[kubeletLabels.container] === name,
    )
    let id = existing?.id
    if (id === undefined) {
      const prepared = await this.#prepare(container, status)
      if (prepared === undefined) return
      id = prepared
      this.#signal.throwIfAborted()
      try {
        await this.#docker.start(id, stringsOf(container.command)[0] ?? "", status.image, `container "${name}"`)
      } catch (error) {
        if (this.#signal.aborted) throw error
        const message = error instanceof Error ? error.message : String(error)
        status.state = { terminated: { exitCode: 128, reason: "StartError", message, containerID: `docker://${id}` } }
        this.#write()
        return
      }
    }
    const started = await this.#docker.inspect(id)
    status.containerID = `docker://${id}`
    status.started = true
    if (started.running) {
      status.ready = true
      status.state = { running: { startedAt: started.startedAt ?? now() } }
      if (this.#statuses.every((each) => each.ready)) {
        this.#condition("ContainersReady", "True")
        this.#condition("Ready", "True")
      }
      this.#write("Running")
      try {
        const code = await this.#docker.wait(id)
        // A stopping daemon answers wait() with the code it killed the container with: only a new connection tells.
        if (code !== 0 && !(await this.#docker.ping())) throw new Error("it no longer takes connections")
      } catch (error) {
        if (this.#signal.aborted) throw error
        // What a kubelet reports for a container its runtime lost, with the daemon named.
        const gone = this.#docker.wentAway(
          `container "${name}"`,
          error instanceof Error ? error.message : String(error),
          error,
        )
        status.ready = false
        status.started = false
        status.state = {
          terminated: {
            exitCode: 137,
            reason: "ContainerStatusUnknown",
            message: gone.message,
            containerID: `docker://${id}`,
          },
        }
        this.#write()
        return
      }
    }
    const ended = await this.#docker.inspect(id)
    status.ready = false
    status.started = false
    const reason = ended.oomKilled ? "OOMKilled" : ended.exitCode === 0 ? "Completed" : "Error"
    status.state = {
      terminated: {
        exitCode: ended.exitCode,
        reason,
        ...(ended.error === "" ? {} : { message: ended.error }),
        ...(ended.startedAt === undefined ? {} : { startedAt: ended.startedAt }),
        ...(ended.finishedAt === undefined ? {} : { finishedAt: ended.finishedAt }),
        containerID: `docker://${id}`,
      },
    }
    this.#write()
  }

  /** Creates the container (pulling its image, resolving its env and volumes); undefined when it cannot be. */
  async #prepare(container: Json, status: ContainerStatus): Promise<string | undefined> {
    for (;;) {
      let spec: ContainerSpec
      let files: { path: string; content: Buffer; mode: number }[]
      try {
        ;({ spec, files } = await this.#containerSpec(container))
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error
        status.state = { waiting: { reason: "CreateContainerConfigError", message: error.message } }
        this.#write()
        await sleep(retryMs, this.#signal)
        continue
      }
      try {
        const progress = () => {}
        const id = await this.#docker.create(spec, { progress, signal: this.#signal }, `container "${status.name}"`)
        if (files.length > 0) await this.#docker.putFiles(id, files)
        return id
      } catch (error) {
        if (this.#signal.aborted) throw this.#signal.reason
        if (!(error instanceof ImagePullError)) {
          const message = error instanceof Error ? error.message : String(error)
          status.state = { waiting: { reason: "CreateContainerError", message } }
          this.#write()
          return undefined
        }
        // As the kubelet: ErrImagePull, then ImagePullBackOff between tries.
        const pulled = "waiting" in status.state && status.state.waiting.reason === "ErrImagePull"
        const message = `Failed to pull image "${error.image}": ${error.reason}`
        status.state = { waiting: { reason: pulled ? "ImagePullBackOff" : "ErrImagePull", message } }
        this.#write()
        await sleep(pulled ? 5 * retryMs : retryMs, this.#signal)
      }
    }
  }

  async #containerSpec(
    container: Json,
  ): Promise<{ spec: ContainerSpec; files: { path: string; content: Buffer; mode: number }[] }> {
    const podUid = this.#pod.metadata.uid ?? ""
    const volumes = new Map(listOf(objectOf(this.#pod.spec).volumes).map((volume) => [String(volume.name), volume]))
    const mounts: { volume: string; path: string; readOnly?: boolean }[] = []
    const files: { path: string; content: Buffer; mode: number }[] = []
    for (const mount of listOf(container.volumeMounts)) {
      const volume = volumes.get(String(mount.name))
      if (volume === undefined) throw new ConfigError(`volume "${String(mount.name)}" is not defined in the Pod`)
      const path = String(mount.mountPath)
      const readOnly = mount.readOnly === true
      if (isObject(volume.emptyDir)) {
        const dockerName = `runnel-kube-${podUid}-${String(volume.name)}`
        await this.#docker.createVolume(dockerName, {
          [kubeletLabels.cluster]: this.#cluster,
          [kubeletLabels.pod]: podUid,
        })
        mounts.push({ volume: dockerName, path, readOnly })
      } else if (isObject(volume.persistentVolumeClaim)) {
        const claimName = String(volume.persistentVolumeClaim.claimName)
        const claim = this.#get(persistentVolumeClaimType, claimName)
        if (claim === undefined) throw new ConfigError(`persistentvolumeclaim "${claimName}" not found`)
        mounts.push({ volume: claimVolume(claim.metadata.uid ?? ""), path, readOnly })
      } else if (isObject(volume.secret)) {
        const secretName = String(volume.secret.secretName)
        const secret = this.#get(secretType, secretName)
        if (secret === undefined) throw new ConfigError(`secret "${secretName}" not found`)
        const mode = typeof volume.secret.defaultMode === "number" ? volume.secret.defaultMode : 0o644
        for (const [key, value] of Object.entries(objectOf(secret.data))) {
          files.push({ path: `${path}/${key}`, content: Buffer.from(String(value), "base64"), mode })
        }
      } else {
        throw new ConfigError(
          `volume "${String(volume.name)}": only emptyDir, persistentVolumeClaim and secret volumes are served`,
        )
      }
    }
    const command = [...stringsOf(container.command), ...stringsOf(container.args)]
    const limits = objectOf(objectOf(container.resources).limits)
    // As a kubelet: limits are the cgroup's caps, the cpu request its weight (a request left out is the limit).
    const cpuRequest = objectOf(objectOf(container.resources).requests).cpu ?? limits.cpu
    return {
      spec: {
        image: String(container.image),
        command,
        env: await this.#env(container),
        workDir: typeof container.workingDir === "string" ? container.workingDir : undefined,
        labels: {
          [kubeletLabels.cluster]: this.#cluster,
          [kubeletLabels.pod]: podUid,
          [kubeletLabels.container]: String(container.name),
        },
        mounts,
        output: "kept",
        security: security(objectOf(this.#pod.spec).securityContext, container.securityContext),
        memoryBytes: limits.memory === undefined ? undefined : Math.ceil(quantity(limits.memory)),
        nanoCpus: limits.cpu === undefined ? undefined : Math.round(quantity(limits.cpu) * 1e9),
        cpuShares: cpuRequest === undefined ? undefined : Math.max(2, Math.floor(quantity(cpuRequest) * 1024)),
      },
      files,
    }
  }

  /** `env` with `value` and `valueFrom.secretKeyRef`, as the kubelet resolves it when it creates the container. */
  async #env(container: Json): Promise<Record<string, string>> {
    const env: Record<string, string> = {}
    for (const entry of listOf(container.env)) {
      const name = String(entry.name)
      const ref = objectOf(objectOf(entry.valueFrom).secretKeyRef)
      if (entry.valueFrom === undefined) {
        env[name] = String(entry.value ?? "").replace(
          /\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g,
          (all, key: string) => env[key] ?? all,
        )
        continue
      }
      if (ref.name === undefined) throw new ConfigError(`env ${name}: only valueFrom.secretKeyRef is served`)
      const secret = this.#get(secretType, String(ref.name))
      const value = objectOf(secret?.data)[String(ref.key)]
      if (secret === undefined || value === undefined) {
        if (ref.optional === true) continue
        throw new ConfigError(
          secret === undefined
            ? `secret "${String(ref.name)}" not found`
            : `couldn't find key ${String(ref.key)} in Secret ${this.#pod.metadata.namespace}/${String(ref.name)}`,
        )
      }
      env[name] = Buffer.from(String(value), "base64").toString("utf8")
    }
    return env
  }

  #get(type: typeof secretType, name: string): KubeObject | undefined {
    return this.#api.store.get({ resource: storageResource(type), namespace: this.#pod.metadata.namespace ?? "", name })
  }

  #condition(type: string, status: "True" | "False", reason?: string, message?: string) {
    const old = this.#conditions.find((condition) => condition.type === type)
    if (old !== undefined && old.status === status && old.reason === reason && old.message === message) return
    const next: Condition = {
      type,
      status,
      lastTransitionTime: old?.status === status ? old.lastTransitionTime : now(),
      ...(reason === undefined ? {} : { reason }),
      ...(message === undefined ? {} : { message }),
    }
    this.#conditions = [...this.#conditions.filter((condition) => condition.type !== type), next]
  }

  /** Writes the whole status through the status subresource; a Pod deleted meanwhile ends the run. */
  #write(phase = this.#phase) {
    this.#signal.throwIfAborted()
    this.#phase = phase
    const { namespace, name } = this.#pod.metadata
    const status: Json = { phase, conditions: this.#conditions, qosClass: qosClass(this.#pod) }
    if (this.#conditions.some((condition) => condition.type === "PodScheduled" && condition.status === "True")) {
      status.hostIP = "127.0.0.1"
      status.hostIPs = [{ ip: "127.0.0.1" }]
      status.startTime = this.#startTime
      status.containerStatuses = this.#statuses
    }
    this.#api.update(
      podType,
      namespace,
      name ?? "",
      {
        ...this.#pod,
        metadata: { ...this.#pod.metadata, resourceVersion: undefined, uid: this.#pod.metadata.uid },
        status,
      },
      { subresource: "status" },
    )
  }
}

class ConfigError extends Error {}

const containersOf = (pod: KubeObject) => listOf(objectOf(pod.spec).containers)
const claimVolume = (uid: string) => `runnel-pvc-${uid}`

function finished(pod: KubeObject): boolean {
  const phase = objectOf(pod.status).phase
  return phase === "Succeeded" || phase === "Failed"
}

function claimNames(pod: KubeObject): string[] {
  return listOf(objectOf(pod.spec).volumes)
    .map((volume) => objectOf(volume.persistentVolumeClaim).claimName)
    .filter((name): name is string => typeof name === "string")
}

/**
 * Whether the Pod's required node affinity lets it onto this node: some term whose `matchFields`
 * on `metadata.name` and `matchExpressions` on `kubernetes.io/hostname` (the node's one label) all
 * hold. A term on any other key matches no node here, as on a cluster whose nodes lack that label.
 */
function affinityAllows(pod: KubeObject, nodeName: string): boolean {
  const required = objectOf(
    objectOf(objectOf(objectOf(pod.spec).affinity).nodeAffinity).requiredDuringSchedulingIgnoredDuringExecution,
  )
  const terms = listOf(required.nodeSelectorTerms)
  if (terms.length === 0) return true
  const holds = (requirement: Json, key: string) => {
    if (requirement.key !== key) return false
    const values = stringsOf(requirement.values)
    if (requirement.operator === "In") return values.includes(nodeName)
    if (requirement.operator === "NotIn") return !values.includes(nodeName)
    return false
  }
  return terms.some(
    (term) =>
      listOf(term.matchFields).every((requirement) => holds(requirement, "metadata.name")) &&
      listOf(term.matchExpressions).every((requirement) => holds(requirement, "kubernetes.io/hostname")),
  )
}

/** Guaranteed when every container's limits equal its requests for cpu and memory; BestEffort with none. */
function qosClass(pod: KubeObject): string {
  const resources = containersOf(pod).map((container) => objectOf(container.resources))
  const any = resources.some(
    (each) => Object.keys(objectOf(each.limits)).length + Object.keys(objectOf(each.requests)).length > 0,
  )
  if (!any) return "BestEffort"
  const guaranteed = resources.every((each) => {
    const limits = objectOf(each.limits)
    const requests = { ...limits, ...objectOf(each.requests) }
    return ["cpu", "memory"].every((key) => limits[key] !== undefined && String(limits[key]) === String(requests[key]))
  })
  return guaranteed ? "Guaranteed" : "Burstable"
}

/** The securityContext of the Pod and the container (the container's wins), for Docker. */
function security(podContext: unknown, containerContext: unknown): ContainerSecurity {
  const pod = objectOf(podContext)
  const own = objectOf(containerContext)
  const user = own.runAsUser ?? pod.runAsUser
  const group = own.runAsGroup ?? pod.runAsGroup
  const capabilities = objectOf(own.capabilities)
  return {
    noNewPrivileges: own.allowPrivilegeEscalation === false,
    dropCapabilities: stringsOf(capabilities.drop),
    addCapabilities: stringsOf(capabilities.add),
    privileged: own.privileged === true,
    readOnlyRootFilesystem: own.readOnlyRootFilesystem === true,
    user: user === undefined ? undefined : group === undefined ? String(user) : `${String(user)}:${String(group)}`,
  }
}

type LogRequest = {
  follow: boolean
  stdout: boolean
  stderr: boolean
  timestamps: boolean
  since?: number
  tail?: number
  limitBytes?: number
}

/** PodLogOptions from the query, checked as the API server checks them. */
function logOptions(name: string, query: URLSearchParams): LogRequest {
  const flag = (key: string) => query.get(key) === "true" || query.get(key) === "1"
  const errors: { reason: "FieldValueInvalid" | "FieldValueNotSupported"; field: string; message: string }[] = []
  const integer = (key: string, minimum: number) => {
    const text = query.get(key)
    if (text === null) return undefined
    const value = Number(text)
    if (!Number.isInteger(value))
      throw badRequest(`invalid value for ${key}: ${JSON.stringify(text)} is not an integer`)
    if (value < minimum) {
      errors.push({
        reason: "FieldValueInvalid",
        field: key,
        message: `Invalid value: ${value}: must be greater than ${minimum - 1}`,
      })
    }
    return value
  }
  const tail = integer("tailLines", 0)
  const limitBytes = integer("limitBytes", 1)
  const sinceSeconds = integer("sinceSeconds", 1)
  const sinceTime = query.get("sinceTime")
  if (sinceTime !== null && Number.isNaN(Date.parse(sinceTime))) {
    throw badRequest(`invalid value for sinceTime: ${JSON.stringify(sinceTime)} is not an RFC 3339 time`)
  }
  if (sinceSeconds !== undefined && sinceTime !== null) {
    errors.push({
      reason: "FieldValueInvalid",
      field: "sinceSeconds",
      message: "Invalid value: at most one of `sinceTime` or `sinceSeconds` may be specified",
    })
  }
  const stream = query.get("stream") ?? "All"
  if (!["All", "Stdout", "Stderr"].includes(stream)) {
    errors.push({
      reason: "FieldValueNotSupported",
      field: "stream",
      message: `Unsupported value: "${stream}": supported values: "All", "Stderr", "Stdout"`,
    })
  } else if (stream !== "All" && tail !== undefined) {
    errors.push({
      reason: "FieldValueInvalid",
      field: "tailLines",
      message: `Invalid value: ${tail}: tailLines is not supported when stream is ${stream}`,
    })
  }
  if (errors.length > 0) throw invalid({ group: "", kind: "PodLogOptions" }, name, errors)
  const since =
    sinceTime !== null
      ? Date.parse(sinceTime) / 1000
      : sinceSeconds !== undefined
        ? Date.now() / 1000 - sinceSeconds
        : undefined
  return {
    follow: flag("follow"),
    stdout: stream !== "Stderr",
    stderr: stream !== "Stdout",
    timestamps: flag("timestamps"),
    ...(since === undefined ? {} : { since }),
    ...(tail === undefined ? {} : { tail }),
    ...(limitBytes === undefined ? {} : { limitBytes }),
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", abort)
      resolve()
    }, ms)
    const abort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    signal.addEventListener("abort", abort, { once: true })
  })
}
