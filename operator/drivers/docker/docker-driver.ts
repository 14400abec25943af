import {
  type ContainerSpec,
  DockerHost,
  defaultDockerSocket,
  UnknownHostError,
} from "../../../lib/containers/docker-host.ts"
import { badRequest, errorMessage, SystemError } from "../../../lib/core/errors.ts"
import { ownerIsDead, processOwner } from "../../../lib/core/process-owner.ts"
import {
  assertCacheKey,
  assertVolumeKind,
  type Driver,
  type DriverFactory,
  oomKilledNote,
  type RunDriver,
  type TaskExit,
  type TaskOutput,
  type TaskSpec,
  type Volume,
  type VolumeOptions,
} from "../driver.ts"

export type DockerDefaults = {
  /** The daemon when a pipeline's driver_config names none: DOCKER_HOST, read by the composition code. */
  readonly host?: string | undefined
}

/**
 * Labels on every container and volume the driver creates; `owner` finds what a crashed process left behind.
 * A cache volume carries only `cache` (its key): without the run and owner labels, neither closing a run
 * nor removing leftovers touches it.
 */
export const dockerLabels = {
  run: "dev.runnel.run",
  task: "dev.runnel.task",
  owner: "dev.runnel.owner",
  cache: "dev.runnel.cache",
} as const

/**
 * Runs each task as a container on a Docker daemon. `driver_config.host`
 * (a socket path, `unix:///path`, `tcp://host:port` or `http://host:port`)
 * wins over `defaults.host`, else the default socket.
 */
export function dockerDriverFactory(defaults: DockerDefaults): DriverFactory {
  return {
    name: "docker",
    create(config) {
      const host = config.host ?? defaults.host
      if (host !== undefined && typeof host !== "string") {
        throw badRequest('driver_config.host of the docker driver must be a string, such as "tcp://host:2375"')
      }
      try {
        return new DockerDriver(
          new DockerHost(host || defaultDockerSocket, "start Docker, or run with --driver native"),
        )
      } catch (error) {
        if (error instanceof UnknownHostError) throw badRequest(error.message)
        throw error
      }
    },
  }
}

class DockerDriver implements Driver {
  readonly name = "docker"
  readonly #daemon: DockerHost

  constructor(daemon: DockerHost) {
    this.#daemon = daemon
  }

  async open(runId: string): Promise<RunDriver> {
    return new DockerRun(this.#daemon, runId)
  }

  async removeLeftovers(): Promise<void> {
    const daemon = this.#daemon
    try {
      const [containers, volumes] = await Promise.all([
        daemon.containers(dockerLabels.owner),
        daemon.volumes(dockerLabels.owner),
      ])
      const deadContainers = containers.filter((container) => ownerIsDead(container.labels[dockerLabels.owner]))
      await Promise.all(deadContainers.map((container) => daemon.remove(container.id)))
      const deadVolumes = volumes.filter((volume) => ownerIsDead(volume.labels[dockerLabels.owner]))
      await Promise.all(deadVolumes.map((volume) => daemon.removeVolume(volume.name)))
    } catch (error) {
      throw daemon.error(error, "removing the leftovers of crashed runnel processes failed")
    }
  }

  // No agent of runnel's own to release: dockerode on Node's default agent is the fast path (with an
  // agent of our own, 8 tasks started at once took 1.3x as long, measured), and its idle sockets do
  // not keep the process alive.
  async close(): Promise<void> {}
}

class DockerRun implements RunDriver {
  readonly #daemon: DockerHost
  readonly #runId: string
  /** Volume name (or cache key) as the run knows it, to the Docker volume's name and whether it is a cache. */
  readonly #volumes = new Map<string, { readonly dockerName: string; readonly cache: boolean }>()
  /** Whether anything may exist on the daemon, so closing an empty run needs no daemon at all. */
  #used = false
  #closed = false
  #closing: Promise<void> | undefined

  constructor(daemon: DockerHost, runId: string) {
    this.#daemon = daemon
    this.#runId = runId
  }

  async exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit> {
    signal.throwIfAborted()
    if (this.#closed) throw new SystemError(`task "${task.path}" was started after its run was closed`)
    const startedAt = performance.now()
    const remainingMs = () =>
      task.timeoutMs === undefined ? undefined : Math.max(0, task.timeoutMs - (performance.now() - startedAt))
    const daemon = this.#daemon
    const what = `task "${task.path}"`
    const pull = { progress: printTo(output), signal, timeoutMs: remainingMs() }
    const id = await this.#creating(daemon.create(this.#containerSpec(task), pull, what))
    const kill = () => daemon.kill(id)
    signal.addEventListener("abort", kill)
    let timer: NodeJS.Timeout | undefined
    let started = false
    try {
      const { ended } = await daemon.attach(id, output)
      signal.throwIfAborted()
      await daemon.start(id, task.command.path, task.image, what)
      started = true
      // An abort during start() may have found the container not yet running, so kill() missed it.
      signal.throwIfAborted()
      let timedOut = false
      const timeoutMs = remainingMs()
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          timedOut = true
          kill()
        }, timeoutMs)
      }
      const code = await daemon.wait(id)
      await ended
      signal.throwIfAborted()
      // A daemon that is stopped kills its containers and answers wait() with the code it killed each with, as
      // if the task had failed by itself; only a new connection tells that it is going away. (A task that exits
      // 0 on SIGTERM passes: asking after every task would cost a connection each, ≈3 ms on a busy daemon.)
      if (code !== 0 && !(await daemon.ping())) throw daemon.wentAway(what, "it no longer takes connections")
      if (code !== 0 && !timedOut && (await daemon.inspect(id)).oomKilled) output.stderr(oomKilledNote(task.resources))
      return { code, timedOut }
    } catch (error) {
      if (signal.aborted) throw signal.reason
      if (started && daemon.unreachable(error)) {
        throw daemon.wentAway(what, `${(error as NodeJS.ErrnoException).code}: ${errorMessage(error)}`, error)
      }
      throw daemon.error(error, `${what} failed in Docker`)
    } finally {
      clearTimeout(timer)
      signal.removeEventListener("abort", kill)
      // Failing to remove must not hide the task's result; close() removes whatever carries the run's label.
      await daemon.remove(id).catch(() => {})
    }
  }

  async createVolume(name: string, options: VolumeOptions = {}): Promise<Volume> {
    const cache = options.cache === true
    if (cache) assertCacheKey(name)
    if (this.#closed) throw new SystemError(`volume "${name}" was requested after its run was closed`)
    assertVolumeKind(name, cache, this.#volumes.get(name)?.cache)
    // The daemon returns an existing volume of that name as it is: that is how a cache is found again.
    // Run ids are `run-...`, so no run volume (`runnel-<run id>-<name>`) takes a cache's name.
    const dockerName = cache ? `runnel-cache-${name}` : `runnel-${this.#runId}-${name}`.replace(/[^a-zA-Z0-9_.-]/g, "-")
    const labels: Record<string, string> = cache
      ? { [dockerLabels.cache]: name }
      : { [dockerLabels.run]: this.#runId, [dockerLabels.owner]: processOwner }
    try {
      await this.#creating(this.#daemon.createVolume(dockerName, labels))
    } catch (error) {
      throw this.#daemon.error(error, `${cache ? "cache" : "volume"} "${name}" could not be created`)
    }
    this.#volumes.set(name, { dockerName, cache })
    return { name }
  }

  close(): Promise<void> {
    this.#closed = true
    this.#closing ??= this.#removeAll().catch((error: unknown) => {
      this.#closing = undefined // let a later close() try again
      throw error
    })
    return this.#closing
  }

  async #removeAll(): Promise<void> {
    if (!this.#used) return
    const daemon = this.#daemon
    const label = `${dockerLabels.run}=${this.#runId}`
    try {
      const containers = await daemon.containers(label)
      await Promise.all(containers.map((container) => daemon.remove(container.id)))
      const volumes = await daemon.volumes(label)
      await Promise.all(volumes.map((volume) => daemon.removeVolume(volume.name)))
    } catch (error) {
      throw daemon.error(error, `the containers and volumes of run "${this.#runId}" could not be removed`)
    }
  }

  /** Notes that the daemon may now hold something of the run, unless the request never reached it. */
  async #creating<T>(request: Promise<T>): Promise<T> {
    try {
      const created = await request
      this.#used = true
      return created
    } catch (error) {
      const failure = error as (Error & { code?: string; cause?: { code?: string } }) | undefined
      const code = failure?.code ?? failure?.cause?.code
      if (code !== "ENOENT" && code !== "ECONNREFUSED" && code !== "EACCES") this.#used = true
      throw error
    }
  }

  #containerSpec(task: TaskSpec): ContainerSpec {
    const mounts = Object.entries(task.mounts).map(([path, volume]) => {
      const dockerName = this.#volumes.get(volume.name)?.dockerName
      if (dockerName === undefined) {
        throw new SystemError(`task "${task.path}" mounts volume "${volume.name}", which its run did not create`)
      }
      return { volume: dockerName, path }
    })
    return {
      image: task.image,
      command: [task.command.path, ...task.command.args],
      env: task.env,
      workDir: task.workDir,
      labels: { [dockerLabels.run]: this.#runId, [dockerLabels.task]: task.path, [dockerLabels.owner]: processOwner },
      mounts,
      // runnel stores output from the attach stream; the daemon's own log driver would only cost.
      output: "attach",
      ...(task.privileged === true ? { security: { privileged: true } } : {}),
      memoryBytes: task.resources?.memoryBytes,
      nanoCpus: task.resources?.cpuMillis === undefined ? undefined : task.resources.cpuMillis * 1e6,
      cpuShares: task.resources?.cpuShares,
    }
  }
}

/** Pull progress as lines of the task's stderr. */
function printTo(output: TaskOutput): (line: string) => void {
  return (line) => output.stderr(Buffer.from(`${line}\n`))
}
