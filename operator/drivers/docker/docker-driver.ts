import Docker from "dockerode"
import { badRequest, errorMessage, SystemError } from "../../../lib/core/errors.ts"
import { ownerIsDead, processOwner } from "../../../lib/core/process-owner.ts"
import {
  assertCacheKey,
  assertVolumeKind,
  type Driver,
  type DriverFactory,
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

const defaultSocket = "/var/run/docker.sock"

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
      return new DockerDriver(host || defaultSocket)
    },
  }
}

/** The daemon's address as dockerode wants it, and as a person reads it in an error. */
type Daemon = { readonly docker: Docker; readonly where: string }

class DockerDriver implements Driver {
  readonly name = "docker"
  readonly #daemon: Daemon

  constructor(host: string) {
    this.#daemon = { docker: new Docker(clientOptions(host)), where: host }
  }

  async open(runId: string): Promise<RunDriver> {
    return new DockerRun(this.#daemon, runId)
  }

  async removeLeftovers(): Promise<void> {
    const { docker, where } = this.#daemon
    const filters = { label: [dockerLabels.owner] }
    try {
      const [containers, volumes] = await Promise.all([
        docker.listContainers({ all: true, filters }),
        docker.listVolumes({ filters }),
      ])
      const deadContainers = containers.filter((container) => ownerIsDead(container.Labels[dockerLabels.owner]))
      await Promise.all(deadContainers.map((container) => removeContainer(docker, container.Id)))
      const deadVolumes = (volumes.Volumes ?? []).filter((volume) => ownerIsDead(volume.Labels?.[dockerLabels.owner]))
      await Promise.all(
        deadVolumes.map((volume) => docker.getVolume(volume.Name).remove({ force: true }).catch(ifGone)),
      )
    } catch (error) {
      throw daemonError(error, where, "removing the leftovers of crashed runnel processes failed")
    }
  }

  // No agent of runnel's own to release: dockerode on Node's default agent is the fast path (with an
  // agent of our own, 8 tasks started at once took 1.3x as long, measured), and its idle sockets do
  // not keep the process alive.
  async close(): Promise<void> {}
}

class DockerRun implements RunDriver {
  readonly #daemon: Daemon
  readonly #runId: string
  /** Volume name (or cache key) as the run knows it, to the Docker volume's name and whether it is a cache. */
  readonly #volumes = new Map<string, { readonly dockerName: string; readonly cache: boolean }>()
  /** Whether anything may exist on the daemon, so closing an empty run needs no daemon at all. */
  #used = false
  #closed = false
  #closing: Promise<void> | undefined

  constructor(daemon: Daemon, runId: string) {
    this.#daemon = daemon
    this.#runId = runId
  }

  async exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit> {
    signal.throwIfAborted()
    if (this.#closed) throw new SystemError(`task "${task.path}" was started after its run was closed`)
    const startedAt = performance.now()
    const remainingMs = () =>
      task.timeoutMs === undefined ? undefined : Math.max(0, task.timeoutMs - (performance.now() - startedAt))
    const container = await this.#create(task, output, signal, remainingMs)
    const kill = () => void container.kill().catch(() => {})
    signal.addEventListener("abort", kill)
    let timer: NodeJS.Timeout | undefined
    try {
      const stream = await container.attach({ stream: true, stdout: true, stderr: true })
      const ended = streamEnd(stream)
      ended.catch(() => {}) // awaited below; this only keeps an early exit from leaving it unhandled
      this.#daemon.docker.modem.demuxStream(stream, sink(output, "stdout"), sink(output, "stderr"))
      signal.throwIfAborted()
      await container.start().catch((error: unknown) => {
        throw startError(error, task, this.#daemon.where)
      })
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
      const { StatusCode } = (await container.wait()) as { StatusCode: number }
      await ended
      signal.throwIfAborted()
      return { code: StatusCode, timedOut }
    } catch (error) {
      if (signal.aborted) throw signal.reason
      throw daemonError(error, this.#daemon.where, `task "${task.path}" failed in Docker`)
    } finally {
      clearTimeout(timer)
      signal.removeEventListener("abort", kill)
      // Failing to remove must not hide the task's result; close() removes whatever carries the run's label.
      await container.remove({ force: true, v: true }).catch(() => {})
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
      await this.#creating(this.#daemon.docker.createVolume({ Name: dockerName, Labels: labels }))
    } catch (error) {
      throw daemonError(error, this.#daemon.where, `${cache ? "cache" : "volume"} "${name}" could not be created`)
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
    const { docker, where } = this.#daemon
    const filters = { label: [`${dockerLabels.run}=${this.#runId}`] }
    try {
      const containers = await docker.listContainers({ all: true, filters })
      await Promise.all(containers.map((container) => removeContainer(docker, container.Id)))
      const { Volumes: volumes } = await docker.listVolumes({ filters })
      await Promise.all(
        (volumes ?? []).map((volume) => docker.getVolume(volume.Name).remove({ force: true }).catch(ifGone)),
      )
    } catch (error) {
      throw daemonError(error, where, `the containers and volumes of run "${this.#runId}" could not be removed`)
    }
  }

  /** Creates the task's container, pulling its image first when the daemon does not have it. */
  async #create(
    task: TaskSpec,
    output: TaskOutput,
    signal: AbortSignal,
    remainingMs: () => number | undefined,
  ): Promise<Docker.Container> {
    const { docker, where } = this.#daemon
    const spec = this.#containerSpec(task)
    try {
      return await this.#creating(docker.createContainer(spec))
    } catch (error) {
      if (statusCode(error) !== 404) throw daemonError(error, where, `task "${task.path}" could not be created`)
    }
    await pull(this.#daemon, task.image, output, signal, remainingMs())
    signal.throwIfAborted()
    try {
      return await this.#creating(docker.createContainer(spec))
    } catch (error) {
      throw daemonError(error, where, `task "${task.path}" could not be created after pulling "${task.image}"`)
    }
  }

  /** Notes that the daemon may now hold something of the run, unless the request never reached it. */
  async #creating<T>(request: Promise<T>): Promise<T> {
    try {
      const created = await request
      this.#used = true
      return created
    } catch (error) {
      const code = (error as NodeJS.ErrnoException | undefined)?.code
      if (code !== "ENOENT" && code !== "ECONNREFUSED" && code !== "EACCES") this.#used = true
      throw error
    }
  }

  #containerSpec(task: TaskSpec): Docker.ContainerCreateOptions {
    const binds = Object.entries(task.mounts).map(([path, volume]) => {
      const dockerName = this.#volumes.get(volume.name)?.dockerName
      if (dockerName === undefined) {
        throw new SystemError(`task "${task.path}" mounts volume "${volume.name}", which its run did not create`)
      }
      return `${dockerName}:${path}`
    })
    return {
      Image: task.image,
      // The command runs as given: an image's ENTRYPOINT would otherwise wrap it.
      Entrypoint: [],
      Cmd: [task.command.path, ...task.command.args],
      Env: Object.entries(task.env).map(([key, value]) => `${key}=${value}`),
      WorkingDir: task.workDir,
      Labels: { [dockerLabels.run]: this.#runId, [dockerLabels.task]: task.path, [dockerLabels.owner]: processOwner },
      AttachStdout: true,
      AttachStderr: true,
      HostConfig: {
        Binds: binds,
        // runnel stores output from the attach stream; the daemon's own log driver would only cost
        // (json-file makes line output 3x slower, FLOORS.md section 2).
        LogConfig: { Type: "none", Config: {} },
      },
    }
  }
}

/**
 * Pulls `image`, writing one line per layer status change to the task's
 * stderr (not every progress tick), within `timeoutMs` when given.
 */
async function pull(
  { docker, where }: Daemon,
  image: string,
  output: TaskOutput,
  signal: AbortSignal,
  timeoutMs: number | undefined,
): Promise<void> {
  const bounded = timeoutMs === undefined ? signal : AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
  const print = (line: string) => output.stderr(Buffer.from(`${line}\n`))
  print(`pulling image "${image}": the Docker host does not have it`)
  let failure: string | undefined
  try {
    const stream: NodeJS.ReadableStream = await docker.pull(image, { abortSignal: bounded })
    failure = await followPull(stream, print)
  } catch (error) {
    if (signal.aborted) throw signal.reason
    if (!bounded.aborted) {
      if (unreachable(error)) throw daemonError(error, where, "")
      failure = daemonReason(error)
    }
  }
  if (signal.aborted) throw signal.reason
  if (bounded.aborted) failure = `no result within the task's timeout of ${timeoutMs} ms`
  if (failure !== undefined) {
    throw new SystemError(
      `image "${image}" could not be pulled: ${failure}; is the name right, and can the Docker daemon reach its registry?`,
    )
  }
}

type PullEvent = { status?: string; id?: string; error?: string; errorDetail?: { message?: string } }

/** Reads the daemon's JSON lines; resolves with the error it reported, if any. */
async function followPull(stream: NodeJS.ReadableStream, print: (line: string) => void): Promise<string | undefined> {
  const lastStatus = new Map<string, string>()
  let failure: string | undefined
  let pending = ""
  stream.setEncoding("utf8")
  for await (const chunk of stream) {
    const lines = (pending + String(chunk)).split("\n")
    pending = lines.pop() ?? ""
    for (const line of lines) {
      if (line.trim() === "") continue
      const event = JSON.parse(line) as PullEvent
      if (event.error !== undefined) failure = event.errorDetail?.message ?? event.error
      if (event.status === undefined) continue
      const key = event.id ?? ""
      if (lastStatus.get(key) === event.status) continue
      lastStatus.set(key, event.status)
      print(event.id === undefined ? event.status : `${event.id}: ${event.status}`)
    }
  }
  return failure
}

/**
 * dockerode reads DOCKER_HOST and friends itself and merges them under the
 * options given; every key it may take from there is set here, so the
 * address runnel chose is the one used.
 */
function clientOptions(host: string): Docker.DockerOptions {
  const fromEnvironment = { ca: undefined, cert: undefined, key: undefined, timeout: undefined, pathPrefix: "/" }
  let options: Docker.DockerOptions
  if (host.startsWith("/") || host.startsWith("unix://")) {
    const socketPath = host.startsWith("unix://") ? host.slice("unix://".length) : host
    options = { ...fromEnvironment, socketPath, host: undefined, port: undefined, protocol: "http" }
  } else if (/^(tcp|http):\/\/[^/]/.test(host)) {
    const url = new URL(host.replace(/^tcp:/, "http:"))
    options = { ...fromEnvironment, host: url.hostname, port: url.port || "2375", protocol: "http" }
  } else {
    throw badRequest(
      `Docker host "${host}" is not understood; use a socket path (/var/run/docker.sock), unix:///path, tcp://host:port or http://host:port`,
    )
  }
  return options
}

/** demuxStream only calls write(); a plain object hands each frame on synchronously, with no stream buffering. */
function sink(output: TaskOutput, stream: "stdout" | "stderr"): NodeJS.WritableStream {
  const write = (chunk: Buffer) => {
    output[stream](chunk)
    return true
  }
  return { write } as unknown as NodeJS.WritableStream
}

function streamEnd(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.once("end", resolve)
    stream.once("close", resolve)
    stream.once("error", reject)
  })
}

const unreachableCodes = new Set([
  "ENOENT",
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
])

function unreachable(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code
  return code !== undefined && unreachableCodes.has(code)
}

/** A SystemError saying what failed; when the daemon cannot be reached at all, saying that instead. */
function daemonError(error: unknown, where: string, what: string): Error {
  if (error instanceof SystemError) return error
  const code = (error as NodeJS.ErrnoException | undefined)?.code
  if (unreachable(error)) {
    return new SystemError(
      `cannot reach the Docker daemon at ${where} (${code}); start Docker, or run with --driver native`,
      { cause: error },
    )
  }
  if (code === "EACCES") {
    return new SystemError(
      `no permission to use the Docker daemon at ${where}; run runnel as a user of the docker group, or run with --driver native`,
      { cause: error },
    )
  }
  return new SystemError(`${what}: ${daemonReason(error)}`, { cause: error })
}

function startError(error: unknown, task: TaskSpec, where: string): Error {
  const reason = daemonReason(error)
  if (statusCode(error) !== undefined && /executable file not found|no such file or directory/.test(reason)) {
    return new SystemError(`executable "${task.command.path}" not found in image "${task.image}": ${reason}`, {
      cause: error,
    })
  }
  return daemonError(error, where, `task "${task.path}" could not start in image "${task.image}"`)
}

/** The daemon's own words: its JSON message, else dockerode's message without its "(HTTP code N) ..." prefix. */
function daemonReason(error: unknown): string {
  const message = (error as { json?: { message?: unknown } } | undefined)?.json?.message
  if (typeof message === "string") return message
  return errorMessage(error)
    .replace(/^\(HTTP code \d+\) [^-]*- /, "")
    .trim()
}

function statusCode(error: unknown): number | undefined {
  const code = (error as { statusCode?: unknown } | undefined)?.statusCode
  return typeof code === "number" ? code : undefined
}

function ifGone(error: unknown): void {
  if (statusCode(error) !== 404) throw error
}

/** Removes a container with anything it runs; 409 means a removal is already under way (an exec ending). */
async function removeContainer(docker: Docker, id: string): Promise<void> {
  await docker
    .getContainer(id)
    .remove({ force: true, v: true })
    .catch((error: unknown) => {
      if (statusCode(error) !== 409) ifGone(error)
    })
}
